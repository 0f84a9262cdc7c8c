"""Resuming on purpose (#23 item 3): submit says what it resumes from, refuses a folder
whose last run finished its training unless --resume, and --fresh moves it aside."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from slurmpre.errors import UsageError
from slurmpre.folder import trust
from slurmpre.folder.ledger import Ledger
from slurmpre.lines import sent_to
from slurmpre.login import resuming
from slurmpre.login.spec import load
from slurmpre.login.submit import submit
from slurmpre.slurm.parse import JobInfo

from tests.fakes import Jobs
from tests.records import record
from tests.test_hostile import committed, hf
from tests.test_submit import toml_path, write_spec


def ledger_of(folder: Path, *events: dict[str, object]) -> None:
    ledger = Ledger(folder)
    ledger.ensure()
    for i, fields in enumerate(events):
        ledger.append(record({"time": 1000.0 + i, **fields}))


def finished_run(folder: Path, job: str = "41", step: int = 30, name: str = "exp") -> None:
    """A job that trained to its end in ``folder``: its last checkpoint, exit 0."""
    path = committed(folder, step)
    ledger_of(
        folder,
        {"event": "submitted", "job": job, "name": name},
        {"event": "start", "job": job, "attempt": 0},
        {"event": "checkpoint", "job": job, "attempt": 0, "step": step, "path": str(path)},
        {"event": "end", "job": job, "attempt": 0, "exit_code": 0},
    )


def test_a_finished_run_is_refused_naming_the_job_and_its_last_checkpoint(
    tmp_path: Path,
) -> None:
    finished_run(tmp_path, "41", 30)
    with pytest.raises(UsageError) as err:
        resuming.check(tmp_path)
    message = str(err.value)
    assert err.value.exit_code == 2
    assert "job 41 finished its training there" in message
    assert "step 30" in message and "--resume" in message and "--fresh" in message
    assert "\n" not in message
    plan = resuming.check(tmp_path, resume=True)
    assert plan.lines == (f"resumes from {resuming.earlier(tmp_path).describe()}",)  # type: ignore[union-attr]
    assert "step 30 (step-00000030, written by job 41" in plan.lines[0]


def test_a_preempted_failed_or_cancelled_run_resumes_and_says_from_what(tmp_path: Path) -> None:
    path = committed(tmp_path, 12)
    committed(tmp_path, 5)
    base = [
        {"event": "start", "job": "7", "attempt": 0},
        {"event": "checkpoint", "job": "7", "attempt": 0, "step": 12, "path": str(path)},
    ]
    for ending in (
        [  # preempted: its script stopped on the notice (exit 0), and it was requeued
            {"event": "requeued", "job": "7", "attempt": 0},
            {"event": "end", "job": "7", "attempt": 0, "exit_code": 0},
        ],
        [  # given up (restart cap), though its script exited 0
            {"event": "gave_up", "job": "7", "attempt": 0, "why": "cap"},
            {"event": "end", "job": "7", "attempt": 0, "exit_code": 0},
        ],
        [{"event": "end", "job": "7", "attempt": 0, "exit_code": 1}],  # failed
        [],  # cancelled or killed: no end
        [  # handed over to a successor that has not started
            {"event": "successor", "job": "7", "attempt": 0, "successor": "8",
             "excluded": [], "why": "drain", "submitted_at": 1.0},
            {"event": "end", "job": "7", "attempt": 0, "exit_code": 0},
        ],
    ):  # fmt: skip
        Ledger(tmp_path).path.unlink(missing_ok=True)
        ledger_of(tmp_path, *base, *ending)
        plan = resuming.check(tmp_path)
        assert not plan.move_aside
        assert len(plan.lines) == 1 and plan.lines[0].startswith("resumes from step 12 ")
        assert "written by job 7" in plan.lines[0], ending


def test_the_newest_attempt_decides_and_a_called_off_successor_counts_as_finished(
    tmp_path: Path,
) -> None:
    committed(tmp_path, 3)
    ledger_of(
        tmp_path,
        {"event": "start", "job": "7", "attempt": 0},
        {"event": "end", "job": "7", "attempt": 0, "exit_code": 0},
        {"event": "start", "job": "9", "attempt": 0},  # a later run, resubmitted, failing
        {"event": "end", "job": "9", "attempt": 0, "exit_code": 3},
    )
    assert resuming.finished_by(Ledger(tmp_path).records()) is None
    ledger_of(
        tmp_path,
        {"event": "start", "job": "10", "attempt": 1},
        {"event": "successor", "job": "10", "attempt": 1, "successor": "11", "excluded": [],
         "why": "drain", "submitted_at": 1.0},
        {"event": "requeue_skipped", "job": "10", "attempt": 1,
         "why": "the training finished its work after the notice"},
        {"event": "end", "job": "10", "attempt": 1, "exit_code": 0},
    )  # fmt: skip
    assert resuming.finished_by(Ledger(tmp_path).records()) == "10"


def test_nothing_to_resume_starts_at_step_zero(tmp_path: Path) -> None:
    assert resuming.check(tmp_path / "new").lines == (
        "starts at step 0: no complete checkpoint in the folder",
    )
    (tmp_path / "partial" / "step-00000009.incoming").mkdir(parents=True)
    assert resuming.check(tmp_path / "partial").lines[0].startswith("starts at step 0")


def test_a_checkpoint_slurmpre_did_not_record_is_named_by_its_time(tmp_path: Path) -> None:
    os.utime(hf(tmp_path, 40), (0, 86400.0))
    (line,) = resuming.check(tmp_path).lines
    assert line == (
        "resumes from step 40 (checkpoint-40, written by a job slurmpre did not record, "
        "1970-01-02 00:00 UTC)"
    )


def test_fresh_moves_the_folder_aside_with_a_dated_name_and_deletes_nothing(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "run"
    finished_run(folder)
    before = sorted(p.relative_to(folder) for p in folder.rglob("*"))
    plan = resuming.check(folder, fresh=True)
    assert plan.move_aside
    first = resuming.move_aside(folder, now=0.0)
    assert first == tmp_path / "run.19700101T000000Z"
    assert sorted(p.relative_to(first) for p in first.rglob("*")) == before
    finished_run(folder)
    second = resuming.move_aside(folder, now=0.0)  # the same second: a name not taken
    assert second == tmp_path / "run.19700101T000000Z-1"
    assert first.exists() and not folder.exists()
    with pytest.raises(UsageError, match="give one of them"):
        resuming.check(folder, resume=True, fresh=True)


def test_fresh_refuses_a_link_and_leaves_it_and_its_target(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    finished_run(target)
    link = tmp_path / "run"
    link.symlink_to(target)
    with pytest.raises(UsageError, match="is a link to") as err:
        resuming.move_aside(link)
    assert "\n" not in str(err.value)
    assert link.is_symlink() and resuming.earlier(target) is not None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere", "run"]


def test_an_arrays_tasks_are_judged_one_by_one(tmp_path: Path) -> None:
    committed(tmp_path / "task-0", 4)
    finished_run(tmp_path / "task-1", "5_1", 8)
    (tmp_path / "task-2").mkdir()
    with pytest.raises(UsageError, match=r"job 5_1 finished its training there \(in task-1\)"):
        resuming.check(tmp_path, is_array=True)
    lines = resuming.check(tmp_path, is_array=True, resume=True).lines
    assert [line.split(" (")[0] for line in lines] == [
        "task-0: resumes from step 4",
        "task-1: resumes from step 8",
    ]


class Submits(Jobs):
    def __init__(self, known: dict[str, JobInfo] | None = None) -> None:
        super().__init__(known or {})
        self.scripts: list[str] = []

    def submit(self, script: str, *, args: object = (), test_only: bool = False) -> str:
        self.scripts.append(script)
        return str(100 + len(self.scripts))

    def config(self) -> dict[str, str]:
        return {}  # no expedited requeue: `--requeue` as on 22.05


def spec_in(tmp_path: Path, folder: Path) -> Path:
    return write_spec(
        tmp_path / "job.toml",
        [
            'name = "exp"',
            'command = ["train.py"]',
            f"checkpoint_dir = {toml_path(folder)}",
            f"python = {toml_path(Path(sys.executable))}",
        ],
    )


def test_submit_refuses_then_resumes_or_starts_fresh_on_purpose(tmp_path: Path) -> None:
    folder = tmp_path / "ck"
    finished_run(folder, "41", 30)
    spec = load(spec_in(tmp_path, folder), ())
    client = Submits()
    with pytest.raises(UsageError, match="job 41 finished its training"):
        submit(spec, client)
    assert client.scripts == []
    said: list[str] = []
    with sent_to(said.append, submit.__module__):
        assert submit(spec, client, resume=True).job_id == "101"
    assert said[0].startswith("resumes from step 30 (step-00000030, written by job 41")
    said.clear()
    with sent_to(said.append, submit.__module__):
        assert submit(spec, client, fresh=True).job_id == "102"
    (aside,) = [p for p in tmp_path.iterdir() if p.name.startswith("ck.")]
    assert said == [f"moved the earlier ck aside to {aside}; starts at step 0"]
    assert resuming.earlier(aside) is not None and resuming.earlier(folder) is None
    assert Ledger(folder).path.exists()  # the new job's ledger


def test_fresh_never_moves_a_folder_a_live_job_uses(tmp_path: Path) -> None:
    folder = tmp_path / "ck"
    finished_run(folder, "41", 30)
    ledger_of(folder, {"event": "submitted", "job": "50"})
    spec = load(spec_in(tmp_path, folder), ())
    live = JobInfo("50", "exp", "RUNNING", None, 0, True, ("n1",), "1", None, "n1", None, {})
    client = Submits({"50": live})
    for force in (False, True):
        with pytest.raises(UsageError, match=r"in use by job 50 .*--fresh never moves"):
            submit(spec, client, fresh=True, force=force)
    assert folder.is_dir() and [p.name for p in tmp_path.iterdir() if p.name.startswith("ck")] == [
        "ck"
    ]


# -- --fresh moves only a job's own folder (#35) -----------------------------------------
@pytest.mark.parametrize("where", ["home", "above home", "root"])
def test_fresh_never_moves_home_or_a_folder_above_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    home = tmp_path / "home" / "alice"
    finished_run(home)  # even one that looks like a job's folder
    monkeypatch.setenv("HOME", str(home))
    folder = {"home": home, "above home": home.parent, "root": Path("/")}[where]
    with pytest.raises(UsageError, match="never moved"):
        resuming.move_aside(folder)
    assert home.is_dir() and (home / ".slurmpre").is_dir()


def test_fresh_never_moves_a_parent_of_other_jobs_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``checkpoint_dir = "~/checkpoints/$EXP"`` with EXP empty names ~/checkpoints, which
    holds other jobs' folders (the spec refuses the empty variable; this is the second
    line, for a folder named by hand)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    parent = tmp_path / "home" / "checkpoints"
    finished_run(parent / "other-run", name="other")
    finished_run(parent)  # a ledger of its own too: still not one job's folder
    with pytest.raises(UsageError, match="holds another job's checkpoint folder"):
        resuming.move_aside(parent)
    assert (parent / "other-run" / ".slurmpre").is_dir()


def test_fresh_never_moves_a_folder_that_is_not_this_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    plain = tmp_path / "data"
    (plain / "sub").mkdir(parents=True)
    (plain / "sub" / "file").write_text("x")
    with pytest.raises(UsageError, match="holds no ledger"):
        resuming.move_aside(plain)
    theirs = tmp_path / "theirs"
    finished_run(theirs)
    monkeypatch.setattr(trust, "trusted_uids", lambda: frozenset({os.getuid() + 4242}))
    with pytest.raises(UsageError, match="not this job's own folder"):
        resuming.move_aside(theirs)  # a ledger someone else wrote
    monkeypatch.undo()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert (theirs / ".slurmpre").is_dir()
    renamed = tmp_path / "renamed"
    finished_run(renamed, name="exp-v1")  # the spec was renamed since: still the user's
    assert resuming.move_aside(renamed).name.startswith("renamed.")
    tasks = tmp_path / "sweep"
    finished_run(tasks)
    finished_run(tasks / "task-0")  # an array's tasks keep their folders below it
    assert resuming.move_aside(tasks).name.startswith("sweep.")


def test_an_empty_folder_is_not_moved_aside(tmp_path: Path) -> None:
    (tmp_path / "ck").mkdir()
    plan = resuming.check(tmp_path / "ck", fresh=True)
    assert not plan.move_aside and plan.lines == ("--fresh: the folder is empty; starts at step 0",)


def test_two_submissions_into_one_folder_are_one_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two `submit --fresh` at once each saw no live job and moved the folder from under
    the other's job: now the second waits for the first, then sees its job as live."""
    import threading

    from slurmpre.login import submit as submitting

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(submitting, "SUBMIT_WAIT", 0.5)
    folder = tmp_path / "ck"
    finished_run(folder, "41", 30)
    spec = load(spec_in(tmp_path, folder), ())
    held, release = threading.Event(), threading.Event()

    def first() -> None:
        with submitting.one_at_a_time(folder):
            held.set()
            release.wait(10)

    t = threading.Thread(target=first)
    t.start()
    held.wait(10)
    try:
        with pytest.raises(UsageError, match=r"another submission into .* under way"):
            submit(spec, Submits(), fresh=True)
    finally:
        release.set()
        t.join()
    client = Submits()
    assert submit(spec, client, fresh=True).job_id == "101"
    client.known["101"] = JobInfo("101", "exp", "PENDING", None, 0, True, (), "1", None, None,
                                  None, {})  # fmt: skip
    with pytest.raises(UsageError, match="in use by job 101"):
        submit(spec, client, fresh=True)
    assert len([p for p in tmp_path.iterdir() if p.name.startswith("ck.")]) == 1


def test_a_checkpoint_folder_this_user_may_not_reach_is_named_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder on the way that the user may not search (``/root/x/ckpt`` for another user):
    Path.is_dir() raises EACCES, and submit exited 3 with "unexpected PermissionError".
    (Tests run as root, who may search anything: the error is the file system's here.)"""
    folder = tmp_path / "locked" / "ck"
    spec = load(spec_in(tmp_path, folder), ())
    real = Path.is_dir

    def is_dir(self: Path) -> bool:
        if self == folder:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "is_dir", is_dir)
    client = Submits()
    with pytest.raises(UsageError) as refused:
        submit(spec, client)
    assert str(refused.value) == (
        f"checkpoint_dir = {str(folder)!r}: cannot reach it (Permission denied)"
    )
    assert client.scripts == []
