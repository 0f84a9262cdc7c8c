"""What the tier's tests share."""

from __future__ import annotations

from pathlib import Path

import pytest
from slurmpre.folder.ledger import Ledger


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """An empty checkpoint folder with its ledger."""
    out = tmp_path / "ckpt"
    out.mkdir()
    Ledger(out).ensure()
    return out
