"""What the tier's tests share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from slurmpre.folder.ledger import Ledger

from tests.heard import heard


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
    with heard("slurmpre.tier") as out:
        yield out
