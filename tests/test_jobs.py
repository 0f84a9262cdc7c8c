"""The user's list of submitted jobs, and finding a job by id, name or checkpoint folder."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from slurmpre.errors import UsageError
from slurmpre.folder.ledger import Ledger
from slurmpre.login import jobs

from tests.records import record


def test_remember_and_find_by_id_or_newest_name(tmp_path: Path) -> None:
    index = tmp_path / "state" / "slurmpre" / "jobs.jsonl"
    for job, name in (("10", "a"), ("11", "b"), ("12", "a")):
        jobs.remember(jobs.Submitted(job, name, f"/c/{job}", f"/c/{job}/logs", 1.0), index)
    index.write_text(index.read_text() + "not json\n")
    assert [e.job for e in jobs.known(index)] == ["10", "11", "12"]
    assert jobs.find("11", index).name == "b"  # type: ignore[union-attr]
    assert jobs.find("a", index).job == "12"  # type: ignore[union-attr]
    assert jobs.find("zz", index) is None
    assert stat.S_IMODE(index.stat().st_mode) == 0o600
    assert jobs.locate("a", path=index).checkpoint_dir == "/c/12"
    with pytest.raises(UsageError, match="give its --checkpoint-dir"):
        jobs.locate("zz", path=index)
    with pytest.raises(UsageError, match="JOB is empty"):
        jobs.locate(" ", path=index)


def test_locate_through_a_checkpoint_folders_ledger(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    ledger.ensure()
    ledger.append(record({"event": "submitted", "job": "5", "name": "tiny"}))
    ledger.append(record({"event": "start", "job": "5", "attempt": 0}))
    found = jobs.locate("tiny", str(tmp_path))
    assert (found.job, found.name, found.log_dir) == ("5", "tiny", str(tmp_path / "logs"))
    assert jobs.locate("5", str(tmp_path)).name == "tiny"
    with pytest.raises(UsageError, match="no job '6' in the ledger"):
        jobs.locate("6", str(tmp_path))
    with pytest.raises(UsageError, match="has no ledger"):
        jobs.locate("5", str(tmp_path / "nope"))


def test_the_index_follows_xdg_state_home() -> None:
    assert jobs.index_path({"XDG_STATE_HOME": "/s"}) == Path("/s/slurmpre/jobs.jsonl")
    assert jobs.index_path({"HOME": "/h"}) == Path("/h/.local/state/slurmpre/jobs.jsonl")


def test_status_without_jobs_says_there_are_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from slurmpre.cli import main

    class NoJobs:
        def jobs(self, user: str | None = None) -> list[object]:
            return []

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # nothing submitted
    monkeypatch.setattr("slurmpre.slurm.client.default_client", NoJobs)
    assert main(["status"]) == 0
    out = capsys.readouterr()
    assert out.out == "no slurmpre jobs from this account yet: `slurmpre submit SPEC` queues one\n"
    assert out.err == ""
    assert main(["status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"schema": "slurmpre/jobs/1", "jobs": []}
