"""What the job side's tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.heard import heard


@pytest.fixture
def said() -> Iterator[list[str]]:
    """Every line the job side says, from any thread, as the wrapper (or the steps'
    supervisor) sends them to the job's log (`slurmpre.job.start.run`)."""
    with heard("slurmpre.job") as out:
        yield out
