"""What the job side's tests share."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from slurmpre import lines


@pytest.fixture
def said() -> Iterator[list[str]]:
    """Every line the job side says, from any thread, as the wrapper (or the steps'
    supervisor) sends them to the job's log (`slurmpre.job.start.run`)."""
    out: list[str] = []
    # Not a thread an earlier test left running: its lines are not this test's.
    before = {t.ident for t in threading.enumerate()} - {threading.get_ident()}

    def hear(line: str) -> None:
        if threading.get_ident() not in before:
            out.append(line)

    with lines.sent_to(hear, "slurmpre.job", every_thread=True):
        yield out
