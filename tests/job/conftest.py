"""What the job side's tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.heard import heard


class Clock:
    """A clock a test moves by hand: ``clock()`` reads ``clock.now``; ``sleep`` moves it on."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def said() -> Iterator[list[str]]:
    """Every line the job side says, from any thread, as the wrapper (or the steps'
    supervisor) sends them to the job's log (`slurmpre.job.start.run`)."""
    with heard("slurmpre.job") as out:
        yield out
