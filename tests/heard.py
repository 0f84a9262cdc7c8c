"""The lines a test's own code says, as a process start sends them (`slurmpre.lines`)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from slurmpre import lines


@contextlib.contextmanager
def heard(*loggers: str) -> Iterator[list[str]]:
    """Every line ``loggers`` say, from any thread this test starts: not from a thread an
    earlier test left running, whose lines are not this test's."""
    out: list[str] = []
    before = {t.ident for t in threading.enumerate()} - {threading.get_ident()}

    def hear(line: str) -> None:
        if threading.get_ident() not in before:
            out.append(line)

    with lines.sent_to(hear, *loggers, every_thread=True):
        yield out
