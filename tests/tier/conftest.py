"""What the tier's tests share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from slurmpre.folder.ledger import Ledger
from slurmpre.job.start import tier_log


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """An empty checkpoint folder with its ledger."""
    out = tmp_path / "ckpt"
    out.mkdir()
    Ledger(out).ensure()
    return out


@pytest.fixture
def said() -> Iterator[list[str]]:
    """Every line the tier says, as the wrapper hears them for the job's log (`tier_log`)."""
    out: list[str] = []
    handler = tier_log.hear(out.append)
    yield out
    tier_log.stop(handler)
