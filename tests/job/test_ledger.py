from pathlib import Path

import pytest
from slurmpre.errors import JobEnvironmentError
from slurmpre.job.ledger import Choice, Ledger


def choice(**kw: object) -> Choice:
    base: dict[str, object] = {
        "job": "7",
        "attempt": 1,
        "resume_from": "/c/step-00000010",
        "step": 10,
        "nodes": ("n1", "n2"),
        "world_size": 2,
        "previous_world_size": 4,
        "rdzv_endpoint": "127.0.0.1:20007",
        "published_at": 1.0,
    }
    return Choice(**{**base, **kw})  # type: ignore[arg-type]


def test_append_only_and_readable(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    ledger.ensure()
    ledger.append({"event": "start", "job": "7", "attempt": 0, "world_size": 4})
    ledger.append({"event": "end", "job": "7", "attempt": 0, "exit_code": 0})
    before = ledger.path.read_text()
    ledger.append({"event": "start", "job": "7", "attempt": 1, "world_size": 2})
    assert ledger.path.read_text().startswith(before)
    assert [r["event"] for r in ledger.records()] == ["start", "end", "start"]
    prev = ledger.previous_start("7", 1)
    assert prev is not None and prev["world_size"] == 4


def test_a_line_cut_short_by_a_kill_is_skipped(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    ledger.ensure()
    ledger.append({"event": "start", "job": "7", "attempt": 0})
    with ledger.path.open("a") as fh:
        fh.write('{"event": "end", "jo')
    assert len(ledger.records()) == 1


def test_published_choice_is_read_back(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    ledger.ensure()
    ledger.publish(choice())
    assert ledger.wait_choice("7", 1, timeout=1) == choice()


def test_waiting_for_a_choice_times_out_clearly(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    ledger.ensure()
    now = [0.0]
    with pytest.raises(JobEnvironmentError, match=r"did not publish .* within 30 s"):
        ledger.wait_choice(
            "7", 2, 30, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s)
        )
    assert now[0] >= 30
