"""What the job side's tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from slurmpre import lines


@pytest.fixture
def said() -> Iterator[list[str]]:
    """Every line the job side says, from any thread, as the wrapper (or the steps'
    supervisor) sends them to the job's log (`slurmpre.job.start.run`)."""
    out: list[str] = []
    with lines.sent_to(out.append, "slurmpre.job", every_thread=True):
        yield out
