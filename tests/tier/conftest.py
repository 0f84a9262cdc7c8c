"""What the tier's tests share."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurmpre import lines
from slurmpre.folder.ledger import Ledger


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """An empty checkpoint folder with its ledger."""
    out = tmp_path / "ckpt"
    out.mkdir()
    Ledger(out).ensure()
    return out


@pytest.fixture
def said() -> Iterator[list[str]]:
    """Every line the tier says, from any thread, as the wrapper sends them to the job's log
    (`slurmpre.job.start.run`)."""
    out: list[str] = []
    # Not a thread an earlier test left running: its lines are not this test's.
    before = {t.ident for t in threading.enumerate()} - {threading.get_ident()}

    def hear(line: str) -> None:
        if threading.get_ident() not in before:
            out.append(line)

    with lines.sent_to(hear, "slurmpre.tier", every_thread=True):
        yield out
