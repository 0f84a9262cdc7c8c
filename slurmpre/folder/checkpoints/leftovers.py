"""What dead attempts left in a checkpoint folder: removed, or published when it was
sealed but not yet renamed. Never a complete checkpoint."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from slurmpre.folder.checkpoints.commit import _publish
from slurmpre.folder.checkpoints.layouts import _check_marker
from slurmpre.folder.layout import LEFTOVER, MARKER, STALE, file_tag, step_dir_name


@dataclass(frozen=True)
class Cleaned:
    removed: tuple[str, ...]
    published: tuple[str, ...]  # sealed commits a kill interrupted just before the rename


def clean_leftovers(folder: Path, *, live: str) -> Cleaned:
    """Remove what dead attempts left in ``folder``: in-flight, stale, partial and duplicate
    folders, and their sync marks. ``live`` is the attempt-tag prefix of the attempt that
    is starting (its own folders are kept). Only hidden folders with slurmpre's own names
    are removed; one sealed but not renamed is published when its step has none yet."""
    removed: list[str] = []
    published: list[str] = []
    live_prefix = file_tag(live)
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return Cleaned((), ())
    for entry in entries:
        m = LEFTOVER.match(entry.name)
        if m is None or not entry.is_dir(follow_symlinks=False):
            continue
        tag = m.group("tag")
        if tag is not None and tag.startswith(live_prefix):
            continue
        path = Path(entry.path)
        is_incoming = tag is not None and not entry.name.startswith(".sync")
        if is_incoming and STALE not in entry.name and (path / MARKER).exists():
            step = int(m.group("step"))
            ok, _ = _check_marker(path, step)
            if ok and not (folder / step_dir_name(step)).exists():
                with contextlib.suppress(OSError):
                    published.append(str(_publish(path, folder, step, time.time())))
                    continue
        with contextlib.suppress(OSError):
            shutil.rmtree(path)
            removed.append(entry.name)
    return Cleaned(tuple(removed), tuple(published))
