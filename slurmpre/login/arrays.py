"""Slurm job arrays as the login commands name them: ``123`` is every task of the
array, ``123_5`` its task 5, each task with its own checkpoint folder
(``<checkpoint_dir>/task-5``) and log (``<name>-123_5.out``)."""

from __future__ import annotations

import re

_TASK = re.compile(r"^(\d+)_(\d+)$")


def task_ids(array: str) -> list[str]:
    """The task ids a valid ``--array`` range names, in order, each once:
    ``0-2`` -> 0 1 2; ``1,3,5-9:2%4`` -> 1 3 5 7 9 (``%N`` only limits how many run)."""
    ranges = array.partition("%")[0]
    seen: dict[int, None] = {}
    for part in ranges.split(","):
        span, _, step = part.partition(":")
        first, _, last = span.partition("-")
        for i in range(int(first), int(last or first) + 1, int(step or 1)):
            seen.setdefault(i, None)
    return [str(i) for i in seen]


def split(which: str) -> tuple[str, str | None]:
    """``"123_5"`` -> ("123", "5"); anything else -> (it, None)."""
    m = _TASK.match(which)
    return (m.group(1), m.group(2)) if m else (which, None)


def task_folder(checkpoint_dir: str, task: str) -> str:
    """Where an array task keeps its checkpoints (as `slurmpre.job.start.resume` places them)."""
    return f"{checkpoint_dir.rstrip('/')}/task-{task}"
