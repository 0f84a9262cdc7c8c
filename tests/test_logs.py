"""`slurmpre logs --tail N` (#24 item 3): the last N lines, read from the end."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from slurmpre.errors import UsageError
from slurmpre.login import logs
from slurmpre.login.logs import show, tail_offset


@pytest.mark.parametrize("ending", ["\n", ""])
def test_the_last_n_lines_whatever_the_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ending: str, rng: random.Random
) -> None:
    lines = [f"line {i} " + "x" * rng.randrange(0, 40) for i in range(200)]
    path = tmp_path / "job.out"
    path.write_text("\n".join(lines) + ending)
    monkeypatch.setattr(logs, "CHUNK", 7)  # lines cross chunk edges
    for n in (0, 1, 2, 17, 199, 200, 500):
        out: list[str] = []
        show(path, out.append, tail=n)
        want = lines[-n:] if n else []
        assert "".join(out) == ("\n".join(want) + ending if want else ""), n
    assert tail_offset(tmp_path / "job.out", 500) == 0
    empty = tmp_path / "empty.out"
    empty.write_text("")
    assert tail_offset(empty, 3) == 0
    with pytest.raises(UsageError, match="--tail -1"):
        tail_offset(path, -1)
