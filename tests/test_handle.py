"""The Python API's Job (#24 item 1) and `slurmpre wait` (item 2): waiting follows the
run across hand-overs and ends with its outcome. Slurm is scripted here (tests.fakes);
tests/e2e/test_login.py waits for real jobs on the sandbox."""

from __future__ import annotations

from pathlib import Path

import pytest
from slurmpre.errors import JobFailed, SlurmpreError, UsageError
from slurmpre.folder.ledger import Ledger
from slurmpre.login.handle import Job
from slurmpre.slurm.parse import JobInfo

from tests.fakes import Jobs
from tests.records import record


def info(job: str, state: str) -> JobInfo:
    return JobInfo(job, "n", state, None, 0, True, ("n1",), "1", None, "n1", None, {})


class Timeline(Jobs):
    """Each job's states, one per look, the last one kept."""

    def __init__(self, states: dict[str, list[str]]) -> None:
        super().__init__({})
        self.states = states

    def job(self, job_id: str) -> JobInfo:
        self.asked.append(job_id)
        if job_id not in self.states:
            return super().job(job_id)  # forgotten
        seen = self.states[job_id]
        return info(job_id, seen.pop(0) if len(seen) > 1 else seen[0])


def folder_with(tmp_path: Path, *events: dict[str, object]) -> Path:
    ledger = Ledger(tmp_path)
    ledger.ensure()
    for i, fields in enumerate(events):
        ledger.append(record({"time": 100.0 + i, **fields}))
    return tmp_path


def job_in(folder: Path, client: Jobs, job: str = "7") -> Job:
    return Job(job, "n", folder, folder / "logs", client)


def no_sleep(_: float) -> None:
    pass


def test_wait_returns_completed_once_the_run_has_ended(tmp_path: Path) -> None:
    folder = folder_with(
        tmp_path,
        {"event": "start", "job": "7", "attempt": 0},
        {"event": "end", "job": "7", "attempt": 0, "exit_code": 0},
    )
    client = Timeline({"7": ["PENDING", "RUNNING", "RUNNING", "COMPLETED"]})
    assert job_in(folder, client).wait(sleep=no_sleep) == "COMPLETED"
    assert client.asked.count("7") >= 4


def test_wait_follows_the_run_into_its_successor(tmp_path: Path) -> None:
    folder = folder_with(
        tmp_path,
        {"event": "start", "job": "7", "attempt": 0},
        {"event": "successor", "job": "7", "attempt": 0, "successor": "8", "excluded": [],
         "why": "drain", "submitted_at": 1.0},
        {"event": "end", "job": "7", "attempt": 0, "exit_code": 0},
        {"event": "start", "job": "8", "attempt": 0},
        {"event": "end", "job": "8", "attempt": 0, "exit_code": 0},
    )  # fmt: skip
    client = Timeline({"7": ["COMPLETED"], "8": ["PENDING", "RUNNING", "COMPLETED"]})
    assert job_in(folder, client).wait(sleep=no_sleep) == "COMPLETED"
    assert "8" in client.asked


def test_a_failed_run_raises_naming_the_state_and_why(tmp_path: Path) -> None:
    folder = folder_with(
        tmp_path,
        {"event": "start", "job": "7", "attempt": 0},
        {"event": "gave_up", "job": "7", "attempt": 0,
         "why": "the last 3 attempts committed no checkpoint"},
        {"event": "end", "job": "7", "attempt": 0, "exit_code": 1},
    )  # fmt: skip
    with pytest.raises(JobFailed) as err:
        job_in(folder, Timeline({"7": ["RUNNING", "FAILED"]})).wait(sleep=no_sleep)
    assert err.value.state == "FAILED" and err.value.exit_code == 1
    assert str(err.value) == "job 7 ended FAILED: the last 3 attempts committed no checkpoint"
    folder_with(tmp_path / "c", {"event": "start", "job": "9", "attempt": 0})
    with pytest.raises(JobFailed, match=r"job 9 ended CANCELLED \(cancelled\)"):
        job_in(tmp_path / "c", Timeline({"9": ["CANCELLED"]}), "9").wait(sleep=no_sleep)


def test_a_job_slurm_forgot_is_judged_by_its_ledger(tmp_path: Path) -> None:
    folder_with(
        tmp_path / "done",
        {"event": "start", "job": "7", "attempt": 0},
        {"event": "end", "job": "7", "attempt": 0, "exit_code": 0},
    )
    assert job_in(tmp_path / "done", Timeline({})).wait(sleep=no_sleep) == "COMPLETED"
    folder_with(tmp_path / "failed", {"event": "start", "job": "7", "attempt": 0},
                {"event": "end", "job": "7", "attempt": 0, "exit_code": 2})  # fmt: skip
    with pytest.raises(JobFailed, match=r"job 7 ended \(failed \(exit 2\)\); Slurm no longer"):
        job_in(tmp_path / "failed", Timeline({})).wait(sleep=no_sleep)


def test_wait_gives_up_after_its_timeout_naming_the_state(tmp_path: Path) -> None:
    folder = folder_with(tmp_path, {"event": "start", "job": "7", "attempt": 0})
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    job = job_in(folder, Timeline({"7": ["RUNNING"]}))
    with pytest.raises(SlurmpreError, match=r"job 7 is still RUNNING after 12 s of waiting"):
        job.wait(12, poll=5, sleep=sleep, clock=lambda: now[0])
    assert now[0] == 12.0  # the last sleep is cut to the deadline
    with pytest.raises(UsageError, match="--timeout -1"):
        job.wait(-1)


def test_debug_is_taken_after_the_subcommand_too(capsys: pytest.CaptureFixture[str]) -> None:
    from slurmpre.cli import main

    assert main(["status", "--debug", "no-such-job-anywhere"]) == 2
    err = capsys.readouterr().err
    assert "No such option" not in err  # click would refuse it there
    assert "'no-such-job-anywhere' is not among the jobs you submitted" in err


def test_logs_of_an_array_are_its_tasks_logs_tail_and_node_kept(tmp_path: Path) -> None:
    """What `slurmpre logs 41 --tail 2 --node 1` (and --json) shows: each task's log as
    the ledger places it, Slurm not asked task by task, a task without a log named."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "sweep-41_0.out").write_text("0: a\n1: b\n0: c\n1: d\nslurmpre: ended\n")
    client = Jobs({})  # any question to Slurm fails the test
    array = Job("41", "sweep", tmp_path, logs, client, "0-1")
    texts = array.log_texts(tail=4, node=1)
    assert [(job, path.name, text) for job, path, text in texts] == [
        ("41_0", "sweep-41_0.out", "1: b\n1: d\nslurmpre: ended\n"),
        ("41_1", "sweep-41_1.out", None),
    ]
    assert array.logs() == (
        "==> 41_0 <==\n0: a\n1: b\n0: c\n1: d\nslurmpre: ended\n"
        f"\n==> 41_1 <==\n(no log yet at {logs / 'sweep-41_1.out'})\n"
    )
    assert client.asked == []
    with pytest.raises(UsageError, match="--attempt -1"):
        array.log_texts(attempt=-1)
    with pytest.raises(UsageError, match="--tail -1"):  # refused, not taken for "no log"
        array.log_texts(tail=-1)


def test_status_says_slurm_did_not_answer_and_shows_the_ledger_only_when_asked_to(
    tmp_path: Path,
) -> None:
    """The command line's `status` goes on from the ledger with one line when Slurm does
    not answer (Job's ``warn``); from Python, without ``warn``, the error is raised."""
    from slurmpre.errors import SlurmError

    folder = folder_with(tmp_path, {"event": "start", "job": "7", "attempt": 0})
    said: list[str] = []
    shown = Job("7", "n", folder, folder / "logs", Jobs({}, down=True), warn=said.append)
    assert shown.status().attempts[0].job == "7"
    assert len(said) == 1 and "Slurm did not answer about job 7" in said[0]
    with pytest.raises(SlurmError):
        job_in(folder, Jobs({}, down=True)).status()
    with pytest.raises(SlurmError):  # waiting is not showing: never judged without Slurm
        Job("7", "n", folder, folder / "logs", Jobs({}, down=True), warn=said.append).wait(0)


# -- a wrong argument is named, in one line (#35) ----------------------------------------
def calls(job: Job) -> dict[str, object]:
    import slurmpre

    spec = {"name": "x", "command": "x"}
    return {
        "spec": lambda: slurmpre.submit(123),  # type: ignore[arg-type]
        "force": lambda: slurmpre.submit(spec, force="yes"),  # type: ignore[arg-type]
        "fresh": lambda: slurmpre.sweep([spec], fresh=1),  # type: ignore[arg-type]
        "grid": lambda: slurmpre.sweep(spec, grid="env.A=1"),  # type: ignore[arg-type]
        "max_running": lambda: slurmpre.sweep([spec], max_running=True),
        "which": lambda: Job.find(None),  # type: ignore[arg-type]
        "timeout": lambda: job.wait(timeout="10"),  # type: ignore[arg-type]
        "after_checkpoint": lambda: job.cancel(after_checkpoint="x"),  # type: ignore[arg-type]
        "wait": lambda: job.cancel(wait="x"),  # type: ignore[arg-type]
        "attempt": lambda: job.logs(attempt="x"),  # type: ignore[arg-type]
        "tail": lambda: job.logs(tail="5"),  # type: ignore[arg-type]
        "node": lambda: job.log_texts(node=1.5),  # type: ignore[arg-type]
        "prices": lambda: job.status(prices=1),  # type: ignore[arg-type]
        "folder": lambda: slurmpre.checkpoint(5, 3).__enter__(),  # type: ignore[arg-type]
        "env": lambda: slurmpre.resume_path(env=3),  # type: ignore[arg-type]
        "path": lambda: slurmpre.committed(7),  # type: ignore[arg-type]
    }


@pytest.mark.parametrize("argument", sorted(calls(Job("1", "n", Path("/x"), Path("/x")))))
def test_a_wrong_argument_to_the_python_api_is_named(
    argument: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nine calls raised a bare TypeError (or AttributeError) from deep inside."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    monkeypatch.setenv("SLURMPRE_CHECKPOINT_DIR", str(tmp_path))
    call = calls(job_in(tmp_path, Timeline({})))[argument]
    with pytest.raises(SlurmpreError) as info:
        call()  # type: ignore[operator]
    assert str(info.value).startswith((f"{argument}=", f"{argument} = ")), str(info.value)
    assert info.value.exit_code == 2 and "\n" not in str(info.value)


def test_wait_with_a_negative_timeout_is_bad_input_with_json_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`slurmpre wait JOB --timeout=-1 --json` took the refusal for a job still running."""
    from slurmpre.cli import main
    from slurmpre.login import jobs

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    folder = folder_with(tmp_path / "ck", {"event": "submitted", "job": "7", "name": "n"})
    jobs.remember(jobs.Submitted("7", "n", str(folder), str(folder / "logs"), 1.0))
    for extra in ([], ["--json"]):
        assert main(["wait", "7", "--timeout=-1", *extra]) == 2


def test_a_teammates_job_is_shown_but_never_acted_on(tmp_path: Path) -> None:
    """Under group access a teammate reads the owner's status and logs; waiting on it or
    cancelling it (what acts, or follows as if one's own) stays refused."""
    folder = folder_with(tmp_path, {"event": "start", "job": "7", "attempt": 0})

    class Theirs(Timeline):
        def job(self, job_id: str) -> JobInfo:
            got = super().job(job_id)
            return JobInfo(**{**got.__dict__, "raw": {"UserId": "someone-else(4242)"}})

    job = job_in(folder, Theirs({"7": ["RUNNING"]}))
    assert job.status().job == "7"
    with pytest.raises(UsageError, match="belongs to someone-else, not to you"):
        job.state()
    with pytest.raises(UsageError, match="belongs to someone-else, not to you"):
        job.cancel()
