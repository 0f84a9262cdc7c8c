"""Committing a checkpoint: written hidden, fsynced, sealed with a marker and its
manifest, then published by one rename. A kill at any instant leaves either the previous
state or a complete new checkpoint."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

from slurmpre.atomic import fsync_path, write_atomic
from slurmpre.errors import CheckpointError
from slurmpre.folder.access import OWNER, Access, make_dir, make_dirs, set_mode
from slurmpre.folder.checkpoints.layouts import _check_marker
from slurmpre.folder.checkpoints.names import check_step
from slurmpre.folder.layout import MARKER, FolderLayout


def incoming_path(folder: Path, step: int, attempt_tag: str) -> Path:
    return FolderLayout(folder).incoming(step, attempt_tag)


sync_path = FolderLayout.sync


def fresh_incoming(folder: Path, step: int, attempt_tag: str, access: Access = OWNER) -> Path:
    """An empty in-flight folder; leftovers of an earlier try are set aside, not reused."""
    incoming = incoming_path(folder, step, attempt_tag)
    if incoming.exists():
        incoming.rename(FolderLayout.stale(incoming, time.time_ns()))
    make_dirs(folder, access)
    make_dir(incoming, access)
    return incoming


def commit(incoming: Path, folder: Path, step: int, *, access: Access = OWNER) -> Path:
    """Seal ``incoming`` as the complete checkpoint of ``step`` and move it into place (see
    the module). An existing *complete* checkpoint of the step is never replaced (ours is
    set aside); a partial one is moved aside, not deleted. An empty one is refused: it
    would become "latest" with nothing to resume from. The published folder has the
    access's mode whatever the umask was when the weights were written."""
    check_step(step)
    if not incoming.is_dir():
        raise CheckpointError(f"nothing was written to {str(incoming)!r}")
    manifest: dict[str, int] = {}
    for root, dirs, files in os.walk(incoming):
        dirs.sort()
        for name in sorted(files):
            full = Path(root) / name
            rel = full.relative_to(incoming).as_posix()
            if rel == MARKER:
                continue
            fsync_path(full)
            manifest[rel] = full.stat().st_size
        fsync_path(Path(root), directory=True)
    if not manifest:
        raise CheckpointError(
            f"the checkpoint of step {step} is empty: nothing was written to {str(incoming)!r}"
        )
    marker = incoming / MARKER
    stamp = time.time()
    text = json.dumps({"step": step, "committed_at": stamp, "files": manifest}, sort_keys=True)
    # The group may read it, never rewrite it: what is complete is the owner's word.
    write_atomic(marker, text + "\n", mode=access.file_mode & ~0o022)
    set_mode(incoming, access.dir_mode)
    fsync_path(incoming, directory=True)
    return _publish(incoming, folder, step, stamp)


def _publish(sealed: Path, folder: Path, step: int, stamp: float) -> Path:
    layout = FolderLayout(folder)
    final = layout.step(step)
    if final.is_symlink():
        # A link by this name is no checkpoint (the resolver never takes one), whatever
        # it leads to: set the link itself aside (what it leads to is not touched).
        final.rename(layout.aside("partial", final.name, stamp))
    elif final.exists():
        ok, _ = _check_marker(final, step) if (final / MARKER).exists() else (False, "")
        if ok:
            # Already committed (a periodic and a just-in-time save of one step):
            # keep the one that was there, set ours aside.
            aside = layout.aside("duplicate", final.name, stamp)
            sealed.rename(aside)
            return final
        final.rename(layout.aside("partial", final.name, stamp))
    sealed.rename(final)
    fsync_path(folder, directory=True)
    return final


@contextlib.contextmanager
def writing(
    folder: Path, step: int, attempt_tag: str = "local", access: Access = OWNER
) -> Iterator[Path]:
    """Single-process commit: yield a fresh folder to write into, commit it on success."""
    check_step(step)
    incoming = fresh_incoming(folder, step, attempt_tag, access)
    yield incoming
    commit(incoming, folder, step, access=access)
