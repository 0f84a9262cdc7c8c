"""Successors (restart = "successor"): the hand-over instead of a requeue, without Slurm.

sbatch is a stand-in script here that records what it was given (its arguments, the
script on stdin, its environment): the sandbox tests submit to the real one.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from slurmpre.errors import JobEnvironmentError
from slurmpre.folder.layout import FolderLayout
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import Checkpoint, End, Successor, Waiting
from slurmpre.folder.script import record, recorded, recorded_args
from slurmpre.job.handover.successor import (
    POLL,
    QUICK_POLL,
    submit_env,
    wait_for_predecessor,
)
from slurmpre.job.start.env import JobEnv
from slurmpre.job.start.options import WatchConfig
from slurmpre.slurm.parse import parse_jobs

from tests.conftest import DATA
from tests.fakes import Jobs
from tests.job.test_watch import EPOCH, JOB, Harness

RUNNING = parse_jobs((DATA / "slurm-22.05" / "job-running-elastic.txt").read_text())[0]
DONE = parse_jobs((DATA / "slurm-22.05" / "job-cancelled.txt").read_text())[0]


def fake_sbatch(tmp_path: Path, *, fails: bool = False) -> Path:
    """An sbatch that appends what it got (`sbatch_calls`) and answers job 77, then 78, ...
    (or refuses, as a QOS limit does)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    seen = tmp_path / "sbatch-calls.jsonl"
    body = (
        "import json, os, sys\n"
        f"calls = open({str(seen)!r}, 'a+')\n"
        "calls.seek(0); n = len(calls.readlines())\n"
        "got = {'argv': sys.argv[1:], 'script': sys.stdin.read(), 'env': dict(os.environ)}\n"
        "calls.write(json.dumps(got) + '\\n')\n"
    )
    if fails:
        body += "sys.stderr.write('sbatch: error: QOSMaxSubmitJobPerUserLimit\\n')\nsys.exit(1)\n"
    else:
        body += "print(77 + n)\n"
    sbatch = bin_dir / "sbatch"
    sbatch.write_text(f"#!{os.sys.executable}\n" + body)  # type: ignore[attr-defined]
    sbatch.chmod(sbatch.stat().st_mode | stat.S_IXUSR)
    return seen


def sbatch_calls(seen: Path) -> list[dict[str, Any]]:
    """What `fake_sbatch` got, call by call."""
    return [json.loads(line) for line in seen.read_text().splitlines()]


# What the submit gave sbatch on its command line (`slurmpre.login.render.command_line`).
RECORDED_ARGS = ["--job-name=x", "--constraint=preemptible", "--requeue"]


def recorded_submit(folder: Path) -> None:
    Ledger(folder).ensure()
    record(FolderLayout(folder), "#!/bin/bash\necho train\n", RECORDED_ARGS)


def job_env(tmp_path: Path, **env: str) -> dict[str, str]:
    """The environment of the job whose watcher submits: its sbatch first on PATH."""
    return {"PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", **env}


def test_a_successor_gets_this_jobs_environment_without_what_slurm_set_for_it() -> None:
    env = {"PATH": "/opt/py/bin:/usr/bin:/opt/py/bin", "HF_TOKEN": "t", "SLURM_JOB_ID": "5",
           "SLURM_NODELIST": "n1", "SLURMD_NODENAME": "n1", "PMI_RANK": "0",
           "CUDA_VISIBLE_DEVICES": "0,1", "SBATCH_PARTITION": "p", "SLURMPRE_PREDECESSOR": "4",
           "LD_LIBRARY_PATH": "/a:/b:/a", "SLURM_CONF": "/etc/slurm/b/slurm.conf"}  # fmt: skip
    assert submit_env(env) == {
        "PATH": "/opt/py/bin:/usr/bin",  # the script puts its python first at each hand-over
        "HF_TOKEN": "t",  # the training's own environment: it needs it, and it is not written
        "SBATCH_PARTITION": "p",
        "LD_LIBRARY_PATH": "/a:/b",
        "SLURM_CONF": "/etc/slurm/b/slurm.conf",  # the same cluster as this job's
    }


def test_the_recorded_script_is_the_owners_alone_and_no_environment_is_written(
    tmp_path: Path,
) -> None:
    Ledger(tmp_path).ensure()
    layout = FolderLayout(tmp_path)
    record(layout, "#!/bin/bash\n", ["--job-name=x y"])
    assert recorded(layout) == "#!/bin/bash\n"
    assert recorded_args(layout, "#!/bin/bash\n") == ["--job-name=x y"]
    assert layout.script.stat().st_mode & 0o777 == 0o600
    assert layout.script_args.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in layout.meta.iterdir()) == ["job.sbatch", "job.sbatch-args.json"]
    # A slurmpre from before them wrote another script since: its options are not these.
    layout.script.write_text("#!/bin/bash\n#SBATCH --nodes=2\n")
    assert recorded_args(layout, recorded(layout)) == []
    layout.script_args.unlink()  # as a slurmpre from before them recorded the script
    assert recorded_args(layout, "#!/bin/bash\n") == []


def harness(tmp_path: Path, *, fails: bool = False, job: JobEnv = JOB) -> tuple[Harness, Path]:
    folder = tmp_path / "ckpt"
    folder.mkdir()
    seen = fake_sbatch(tmp_path, fails=fails)
    recorded_submit(folder)
    env = job_env(tmp_path, SLURM_JOB_ID="99")
    h = Harness(folder, config=WatchConfig(restart="successor"), env=env, job=job)
    h.slurm.requeue_flag = True  # type: ignore[attr-defined]

    def set_requeue(job_id: str, requeue: bool) -> None:
        h.slurm.requeue_flag = requeue  # type: ignore[attr-defined]
        h.said.append(f"(set_requeue {job_id} {requeue})")

    h.slurm.set_requeue = set_requeue  # type: ignore[method-assign]
    return h, seen


def test_on_a_drain_a_successor_takes_over_instead_of_a_requeue(tmp_path: Path) -> None:
    h, seen = harness(tmp_path)
    h.commit(10)
    h.slurm.drains["gpu-preemptible-dp-2"] = (12.3, "preempted")
    h.at(20.0, lambda: h.commit(14))  # the notice checkpoint
    h.run()
    assert h.slurm.requeued == []  # no requeue: no 121 s floor
    assert h.slurm.requeue_flag is False  # type: ignore[attr-defined]
    # This job was made non-requeueable before the successor was submitted.
    order = [s for s in h.said if s.startswith("(set_requeue") or "takes over" in s]
    assert order[0] == "(set_requeue 42 False)" and "job 77 takes over from job 42" in order[1]
    got = sbatch_calls(seen)[-1]
    assert got["argv"][-1] == "--exclude=gpu-preemptible-dp-2"
    # The first submit's options again, over the job's SBATCH_* variables; its own after them.
    assert got["argv"][: len(RECORDED_ARGS) + 1] == ["--parsable", *RECORDED_ARGS]
    assert got["script"] == "#!/bin/bash\necho train\n"
    assert got["env"]["SLURMPRE_PREDECESSOR"] == "42"
    assert got["env"]["SLURMPRE_EARLIER_RESTARTS"] == "1"  # the run's restart count goes on
    assert "SLURM_JOB_ID" not in got["env"]  # neither the recorded one nor this job's
    successor = h.record("successor")
    assert successor["successor"] == "77" and successor["excluded"] == ["gpu-preemptible-dp-2"]
    # Submitted at the notice, before the checkpoint: its start-up overlaps the save.
    assert h.events() == ["notice", "successor", "committed"]
    assert h.watcher.outcome.successor == "77"


def test_a_refused_successor_falls_back_to_a_requeue_and_the_job_stays_requeueable(
    tmp_path: Path,
) -> None:
    h, _ = harness(tmp_path, fails=True)
    h.slurm.drains["gpu-preemptible-dp-1"] = (1.0, "preempted")
    h.at(5.0, lambda: h.commit(3))
    h.run()
    assert h.slurm.requeued == ["42"]
    assert h.slurm.requeue_flag is True  # type: ignore[attr-defined]
    assert any("QOSMaxSubmitJobPerUserLimit" in s and "requeuing instead" in s for s in h.said)
    assert "successor" not in h.events()


def test_without_a_recorded_submit_the_job_is_requeued(tmp_path: Path) -> None:
    h = Harness(tmp_path, config=WatchConfig(restart="successor"))
    h.slurm.set_requeue = lambda job_id, requeue: None  # type: ignore[method-assign]
    h.slurm.drains["gpu-preemptible-dp-1"] = (1.0, "preempted")
    h.at(5.0, lambda: h.commit(3))
    h.run()
    assert h.slurm.requeued == ["42"]
    assert any("no recorded submit" in s for s in h.said)


SUCCESSOR = JobEnv("77", 0, 0, ("gpu-preemptible-dp-1",), "gpu-preemptible-dp-1", 0,
                   predecessor="42")  # fmt: skip


def handed_over(tmp_path: Path) -> Ledger:
    ledger = Ledger(tmp_path)
    ledger.ensure()  # (again: the folder may hold a ledger already)
    ledger.append(Successor(job="42", attempt=0, successor="77", excluded=("n2",), why="x",
                            submitted_at=EPOCH))  # fmt: skip
    return ledger


class Ending(Jobs):
    """The predecessor runs for ``runs`` more questions, then has ended."""

    def __init__(self, runs: int) -> None:
        super().__init__({"42": RUNNING})
        self.runs = runs

    def job(self, job_id: str):  # type: ignore[no-untyped-def]
        info = super().job(job_id)
        self.runs -= 1
        return info if self.runs >= 0 else DONE


def test_the_successor_chooses_nothing_until_its_predecessor_has_ended(
    tmp_path: Path, said: list[str]
) -> None:
    ledger, slept = handed_over(tmp_path), []
    wait_for_predecessor(ledger, Ending(3), SUCCESSOR, 100, sleep=slept.append)
    assert len(slept) == 3 and any("has ended (CANCELLED): taking over" in s for s in said)


def test_once_the_predecessors_training_has_exited_its_end_is_looked_for_sooner(
    tmp_path: Path,
) -> None:
    """Its node 0 records the end of its training: Slurm ends the job within a second or
    two, and the successor looks every QUICK_POLL instead of every POLL (each second it
    looks later is training time lost)."""
    ledger, slept = handed_over(tmp_path), []

    def sleep(s: float) -> None:
        slept.append(s)
        if len(slept) == 2:
            ledger.append(End(job="42", attempt=0, exit_code=0, seconds=9.0))

    wait_for_predecessor(ledger, Ending(5), SUCCESSOR, 100, sleep=sleep)
    assert slept == [POLL, POLL, QUICK_POLL, QUICK_POLL, QUICK_POLL] and QUICK_POLL < POLL


def test_an_end_before_the_hand_over_is_an_earlier_steps_and_changes_nothing(
    tmp_path: Path,
) -> None:
    """A predecessor that restarted in place recorded the end of its first step before it
    handed over: its training still runs, and Slurm is asked once a second, not five times."""
    ledger = Ledger(tmp_path)
    ledger.ensure()
    ledger.append(End(job="42", attempt=0, exit_code=0, seconds=9.0))
    handed_over(tmp_path)
    slept: list[float] = []
    wait_for_predecessor(ledger, Ending(3), SUCCESSOR, 100, sleep=slept.append)
    assert slept == [POLL, POLL, POLL]


def test_a_predecessor_that_does_not_end_in_time_is_never_trained_beside(tmp_path: Path) -> None:
    ledger, now = handed_over(tmp_path), [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    with pytest.raises(JobEnvironmentError, match="job 42, which this job takes over from"):
        wait_for_predecessor(ledger, Ending(10**6), SUCCESSOR, 30,
                             clock=lambda: now[0], sleep=sleep)  # fmt: skip


def test_a_predecessor_the_ledger_does_not_name_is_not_waited_for(
    tmp_path: Path, said: list[str]
) -> None:
    """Not after the grace for its record: the live-job check then refuses to share."""
    ledger = Ledger(tmp_path)
    ledger.ensure()
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    wait_for_predecessor(ledger, Ending(10**6), SUCCESSOR, 300,
                         clock=lambda: now[0], sleep=sleep)  # fmt: skip
    assert "records no hand-over" in said[-1]
    assert 30 <= now[0] <= 32


def test_a_hand_over_recorded_just_after_the_successor_starts_is_waited_for(
    tmp_path: Path, said: list[str]
) -> None:
    """The predecessor appends the record once its sbatch has returned: a successor that
    starts first must not take the missing record for a stranger's variable."""
    ledger = Ledger(tmp_path)
    ledger.ensure()
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        if len(slept) == 2:
            handed_over(tmp_path)  # appends the record (the ledger is the same folder)

    wait_for_predecessor(ledger, Ending(5), SUCCESSOR, 300, sleep=sleep)
    assert len(slept) == 5 and "taking over" in said[-1]


def test_a_gone_predecessor_is_not_waited_for(tmp_path: Path, said: list[str]) -> None:
    wait_for_predecessor(handed_over(tmp_path), Jobs({}), SUCCESSOR, 30)
    assert said == []


def test_an_array_tasks_successor_is_that_task_of_a_new_array_job(tmp_path: Path) -> None:
    base = tmp_path / "ckpt"
    folder = base / "task-3"  # an array task's own checkpoints, below the job's folder
    folder.mkdir(parents=True)
    seen = fake_sbatch(tmp_path)
    recorded_submit(base)  # where `slurmpre submit` recorded the job
    task = dataclasses.replace(JOB, job_id="44", array_job_id="40", array_task_id="3")
    config = WatchConfig(restart="successor")
    h = Harness(folder, config=config, job=task, env=job_env(tmp_path))
    h.slurm.set_requeue = lambda job_id, requeue: None  # type: ignore[method-assign]
    h.slurm.drains["gpu-preemptible-dp-1"] = (1.0, "preempted")
    h.at(5.0, lambda: h.commit(3))
    h.run()
    got = sbatch_calls(seen)[-1]
    assert "--array=3" in got["argv"]  # that task alone, not the whole array again
    assert got["env"]["SLURMPRE_PREDECESSOR"] == "40_3"
    assert h.record("successor")["successor"] == "77_3"  # as the new task's records name it


# -- make before break: a script that goes on after its notice checkpoint -------------
def goes_on(h: Harness) -> None:
    """The script asks checkpoint_requested() (and preemption_requested())."""
    FolderLayout(h.folder).goes_on("42", 0).touch()
    h.listening()


def notice_says_stop(h: Harness) -> bool | None:
    path = FolderLayout(h.folder).notice("42", 0)
    return json.loads(path.read_text())["stop"] if path.exists() else None


def waiting(h: Harness, successor: str = "77") -> None:
    """The successor's training waits in resume_path() (what the API appends)."""
    h.ledger.append(Waiting(job=successor, attempt=0, predecessor="42", waiting_at=h.clock.wall()))


def test_a_script_that_goes_on_trains_until_its_successor_waits_then_stops(
    tmp_path: Path,
) -> None:
    h, _ = harness(tmp_path)
    goes_on(h)
    h.slurm.drains["gpu-preemptible-dp-2"] = (12.3, "preempted")
    seen: dict[str, object] = {}
    h.at(16.0, lambda: seen.setdefault("at notice", notice_says_stop(h)))
    h.at(18.0, lambda: h.commit(14, after_notice=True))  # the notice checkpoint
    h.at(30.0, lambda: seen.setdefault("trains on", notice_says_stop(h)))
    h.at(40.0, lambda: waiting(h))  # the successor has started up
    h.run()  # done once it has told the script to stop: the successor is on its way
    assert seen == {"at notice": False, "trains on": False}
    assert notice_says_stop(h) is True
    stopping = h.record("stopping")
    assert stopping["why"] == "job 77 is ready to take over"
    assert 40.0 <= float(stopping["asked_at"]) - EPOCH <= 41.0  # type: ignore[arg-type]
    assert h.events() == ["notice", "successor", "checkpoint", "committed", "waiting",
                          "stopping"]  # fmt: skip
    assert h.watcher.outcome.successor == "77" and h.slurm.requeued == []


def test_a_script_that_goes_on_is_stopped_before_its_deadline_when_no_successor_waits(
    tmp_path: Path,
) -> None:
    """No free node: the successor pends; the script trains on and is told to stop by
    the deadline less what its notice checkpoint took (notice file to commit)."""
    h, _ = harness(tmp_path)
    goes_on(h)
    h.slurm.drains["gpu-preemptible-dp-2"] = (0.0, "preempted")
    h.at(9.0, lambda: h.commit(14, after_notice=True))
    h.run()  # never exits: the watcher ends at the deadline
    stopping = h.record("stopping")
    assert stopping["why"] == "the deadline nears"
    deadline = 300 - 30  # window less the margin, from the drain
    took = 9.0 - (float(h.record("notice")["seen_at"]) - EPOCH)  # type: ignore[arg-type]
    asked = float(stopping["asked_at"]) - EPOCH  # type: ignore[arg-type]
    assert deadline - took - 2 <= asked <= deadline - took
    assert h.watcher.outcome.successor == "77"


def test_a_requeue_tells_a_script_that_goes_on_to_stop_at_the_notice(tmp_path: Path) -> None:
    """Without a successor on its way, going on would only push the requeue's floor later."""
    h = Harness(tmp_path, config=WatchConfig(restart="requeue"))
    goes_on(h)
    h.slurm.drains["gpu-preemptible-dp-1"] = (1.0, "preempted")
    seen: list[bool | None] = []
    h.at(8.0, lambda: seen.append(notice_says_stop(h)))
    h.at(9.0, lambda: h.commit(12, after_notice=True))
    h.at(9.5, h.take)
    h.run()
    assert seen == [True] and h.slurm.requeued == ["42"]
    assert "stopping" not in h.events()


def test_a_successor_is_called_off_when_the_training_finishes_its_work_after_all(
    tmp_path: Path,
) -> None:
    h, _ = harness(tmp_path)
    goes_on(h)
    h.slurm.cancelled = []  # type: ignore[attr-defined]
    h.slurm.cancel = h.slurm.cancelled.append  # type: ignore[attr-defined,method-assign]
    h.slurm.drains["gpu-preemptible-dp-2"] = (12.3, "preempted")
    h.at(18.0, lambda: h.commit(14, after_notice=True))
    h.at(25.0, lambda: h.watcher.post_exit(0))  # it reached its last step: done
    h.run()
    assert h.slurm.cancelled == ["77"]  # type: ignore[attr-defined]
    assert h.watcher.outcome.action.value == "skip"  # type: ignore[union-attr]


# -- the protocol's edges ------------------------------------------------------------
def test_a_job_submitted_without_requeue_gets_no_successor(tmp_path: Path) -> None:
    h, seen = harness(tmp_path)
    h.watcher.restarts.requeue_allowed = False
    h.slurm.drains["gpu-preemptible-dp-2"] = (12.3, "preempted")
    h.at(20.0, lambda: h.commit(14))
    h.run()
    assert not seen.exists()  # sbatch never ran
    assert "successor" not in h.events() and h.slurm.requeued == []
    assert h.watcher.outcome.action.value == "skip"  # type: ignore[union-attr]


def test_a_predecessor_removed_during_the_hand_over_is_taken_over_from(
    tmp_path: Path, said: list[str]
) -> None:
    """The node goes before the predecessor has committed: Slurm ends it NODE_FAIL and, with
    Requeue=0, does not bring it back; the successor goes on from the newest complete."""
    ledger, slept = handed_over(tmp_path), []
    gone = dataclasses.replace(DONE, state="NODE_FAIL")

    class Removed(Ending):
        def job(self, job_id: str):  # type: ignore[no-untyped-def]
            return gone if super().job(job_id) is DONE else RUNNING

    wait_for_predecessor(ledger, Removed(2), SUCCESSOR, 100, sleep=slept.append)
    assert len(slept) == 2 and "has ended (NODE_FAIL): taking over" in said[-1]


def test_a_predecessor_requeued_by_hand_after_its_hand_over_does_not_train_again(
    tmp_path: Path, said: list[str]
) -> None:
    """Requeue=0 stops Slurm's own requeues, not an operator's `scontrol requeue`: the
    successor does not wait for the requeued job, and that job's next attempt finds its
    hand-over in the ledger and ends at once, exit 0, without training."""
    from slurmpre.errors import HandedOver
    from slurmpre.job.start.args import parse_args
    from slurmpre.job.start.resume import AttemptContext, agree

    ledger = handed_over(tmp_path)
    requeued = dataclasses.replace(RUNNING, state="PENDING", restarts=1)
    wait_for_predecessor(ledger, Jobs({"42": requeued}), SUCCESSOR, 100)
    assert "requeued after its hand-over: taking over" in said[-1]

    again = dataclasses.replace(JOB, restart_count=1)
    opts = parse_args(["--checkpoint-dir", str(tmp_path), "--", "python", "train.py"])
    with pytest.raises(HandedOver, match="handed over to job 77") as caught:
        agree(AttemptContext(opts, again, tmp_path, ledger, Jobs({}), {}))
    assert caught.value.exit_code == 0
    assert not FolderLayout(tmp_path).choice("42", "1").exists()  # nothing chosen


def test_at_the_deadline_a_script_that_goes_on_is_told_to_stop(tmp_path: Path) -> None:
    """It never took its notice checkpoint (it was still starting): the deadline hands over,
    and the notice must say stop, or it would train on until the node is removed while its
    successor waits for it."""
    h, _ = harness(tmp_path)
    goes_on(h)
    h.slurm.drains["gpu-preemptible-dp-2"] = (0.0, "preempted")
    h.run()
    assert h.watcher.outcome.why == "deadline inside the window"
    assert notice_says_stop(h) is True


def test_a_successor_drained_while_it_starts_trains_until_the_next_one_is_ready(
    tmp_path: Path,
) -> None:
    """Drained before its script asked anything (it waited for its own predecessor): with
    its successor submitted at the notice, it does not give up at once (the requeue path's
    'nothing to save'): it may train on the draining node until the next job is ready."""
    h, _ = harness(tmp_path)
    FolderLayout(h.folder).listening("41", "0").touch()  # an earlier job's script listened
    h.slurm.drains["gpu-preemptible-dp-2"] = (0.0, "preempted")
    said: dict[str, object] = {}
    h.at(20.0, lambda: said.setdefault("starting", notice_says_stop(h)))
    h.at(30.0, lambda: goes_on(h))  # its script starts, and can go on
    h.at(31.0, lambda: h.commit(14, after_notice=True))
    h.at(60.0, lambda: said.setdefault("trains on", notice_says_stop(h)))
    h.at(90.0, lambda: waiting(h))
    h.run()
    assert said == {"starting": False, "trains on": False}
    assert h.record("stopping")["why"] == "job 77 is ready to take over"


def test_another_jobs_notice_checkpoint_is_not_this_jobs(tmp_path: Path) -> None:
    """Every successor's first attempt is attempt 0, as its predecessor's was: the watcher
    must not take the predecessor's notice checkpoint for its own (it did, in the stock
    drill: the successor was told to stop at its first step)."""
    h, _ = harness(tmp_path)
    h.ledger.append(
        Checkpoint(job="41", attempt=0, step=9, path=str(tmp_path / "p9"), after_notice=True)
    )
    h.listening()
    h.slurm.drains["gpu-preemptible-dp-2"] = (0.0, "preempted")
    h.at(20.0, lambda: h.commit(12, after_notice=True))
    h.run()
    assert h.record("committed")["step"] == 12


# -- a job whose batch script runs slurmpre's supervisor (a node range) -----------------------
SUPERVISED = dataclasses.replace(JOB, batch_host="gpu-preemptible-dp-1")


def test_a_step_stopped_at_its_checkpoint_is_ended_for_the_successor_at_once(
    tmp_path: Path,
) -> None:
    """The batch host drains (no in-place restart): once the notice checkpoint has
    committed and the script stops at it, the supervisor is asked to end the step, so a
    rank stuck in its teardown cannot hold the job (and the successor) for KillWait."""
    from slurmpre.job.handover.inplace import read_request

    h, _ = harness(tmp_path, job=SUPERVISED)
    h.listening()
    h.slurm.drains["gpu-preemptible-dp-1"] = (12.3, "preempted")
    h.at(19.0, h.take)
    h.at(20.0, lambda: h.commit(14, after_notice=True))
    h.run()
    assert h.watcher.outcome.successor == "77"
    ask = read_request(FolderLayout(h.folder).in_place_request("42", "0"))
    assert ask is not None and ask.keep == () and ask.release == ()
    assert any(s.startswith("asking the supervisor to end the step") for s in h.said)


def test_a_script_that_went_on_keeps_its_step_until_it_ends_by_itself(tmp_path: Path) -> None:
    """Told to stop after its notice checkpoint, it writes one more: the step must not be
    ended under that save."""

    h, _ = harness(tmp_path, job=SUPERVISED)
    goes_on(h)
    h.slurm.drains["gpu-preemptible-dp-1"] = (12.3, "preempted")
    h.at(18.0, lambda: h.commit(14, after_notice=True))
    h.at(40.0, lambda: waiting(h))
    h.run()
    assert h.watcher.outcome.successor == "77"
    assert not FolderLayout(h.folder).in_place_request("42", "0").exists()


def _saved_on_the_nodes(h: Harness, step: int, *, served: bool) -> None:
    """What a job with local_dir records: its nodes serve their saves, rank 0 sealed one."""
    from slurmpre.folder.records import Saved, Serving

    if served:
        h.ledger.append(Serving(job="42", attempt=0, node="n1", host="h", port=1))
    h.ledger.append(
        Saved(
            job="42",
            attempt=0,
            step=step,
            path=f"/dev/shm/x/step-{step}",
            seconds=0.1,
            after_notice=True,
        )
    )


def test_a_save_on_the_nodes_answers_the_notice_when_its_nodes_serve_it(tmp_path: Path) -> None:
    """local_dir: the successor pulls the notice save from this step's wrappers, so it
    answers the notice (no wait for the flush), and the step is not ended under them."""

    h, _ = harness(tmp_path, job=SUPERVISED)
    h.listening()
    h.slurm.drains["gpu-preemptible-dp-1"] = (12.3, "preempted")
    h.at(19.0, h.take)
    h.at(20.0, lambda: _saved_on_the_nodes(h, 14, served=True))
    h.run()
    assert h.watcher.outcome.successor == "77"
    assert any("checkpoint of step 14 committed after the notice" in s for s in h.said)
    assert (
        not FolderLayout(h.folder).in_place_request("42", "0").exists()
    )  # its wrappers serve it still


def test_a_save_on_the_nodes_that_nothing_serves_answers_nothing(tmp_path: Path) -> None:
    h, _ = harness(tmp_path, job=SUPERVISED)
    h.listening()
    h.slurm.drains["gpu-preemptible-dp-1"] = (12.3, "preempted")
    h.at(19.0, h.take)
    h.at(20.0, lambda: _saved_on_the_nodes(h, 14, served=False))
    h.run()
    assert not any("committed after the notice" in s for s in h.said)
