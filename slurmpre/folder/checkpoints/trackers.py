"""Folders judged by a file beside them, not by marks inside: Megatron-LM's iteration
tracker and NeMo's unfinished marks (layouts.py sends them here)."""

from __future__ import annotations

import os

from slurmpre.folder.checkpoints.names import (
    MAX_STEP,
    MEGATRON_TRACKER,
    NEMO_UNFINISHED,
    STEP_DIGITS,
    step_of,
)
from slurmpre.folder.checkpoints.scan import Beside


def _not_empty(path: str) -> tuple[bool, str] | None:
    """Why a folder a tracker or a mark calls complete is not (unreadable, or empty)."""
    try:
        with os.scandir(path) as entries:
            if next(entries, None) is None:
                return False, "partial: an empty folder"
    except OSError as exc:
        return False, f"cannot be read: {exc.strerror}"
    return None


def megatron_iteration(text: str) -> int | None:
    """The iteration in Megatron's tracker, read as Megatron reads it (``int()`` of the
    stripped text, which must be above 0); None when Megatron would not read one. "²" is a
    digit to ``str.isdigit`` and not to ``int``; a text longer than any step has is no
    iteration (and ``int()`` refuses more than 4,300 digits)."""
    text = text.strip()
    if len(text) > 2 * STEP_DIGITS:
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return value if 0 < value <= MAX_STEP else None


def check_megatron(path: str, name: str, beside: Beside) -> tuple[bool, str]:
    """Megatron-LM's iter_N: complete at or before the iteration its tracker reads, the
    newest passed over when the tracker does not read as one (docs/login.md's table)."""
    step = step_of(name)
    tracker = beside.tracker
    if tracker is None:
        return False, f"partial: no {MEGATRON_TRACKER} beside it (Megatron writes it after a save)"
    if tracker == "release":
        return False, f"{MEGATRON_TRACKER} says 'release': Megatron loads the release folder"
    iteration = megatron_iteration(tracker)
    if iteration is not None:
        if step is not None and step > iteration:
            return False, f"partial: newer than {MEGATRON_TRACKER} ({iteration}): unfinished"
    elif step is None or step >= (beside.newest_iter or 0):
        why = f"{MEGATRON_TRACKER} does not read as an iteration, and this is the newest"
        return False, f"partial: {why}"
    return _not_empty(path) or (True, f"at or before the iteration in {MEGATRON_TRACKER}")


def check_nemo(path: str, name: str, beside: Beside) -> tuple[bool, str]:
    """NeMo 2: complete when no NAME-unfinished mark is beside it and it holds files
    (docs/login.md's table)."""
    own = name.rpartition("/")[2]
    if own in beside.unfinished:
        why = f"{own}{NEMO_UNFINISHED} is beside it (NeMo is saving or removing it)"
        return False, f"partial: {why}"
    return _not_empty(path) or (True, f"no {NEMO_UNFINISHED} mark beside it")
