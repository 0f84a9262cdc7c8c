"""End to end: the drain becomes a notice, every rank checkpoints the same step, the job requeues
itself before the node is removed, and resumes having lost zero steps.

Real torchrun over gloo on two sandbox nodes; the training script asks
`slurmpre.preemption_requested()` every step (train_tiny.py --honor-notice).
"""

from __future__ import annotations

import itertools
import random
import time
from pathlib import Path
from typing import Any

import pytest
from slurmpre.defaults import POLL_INTERVAL
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.sandbox.config import TUNED
from slurmpre.sandbox.preempt import PreemptPlan
from slurmpre.slurm.client import CommandLineSlurm

from tests.conftest import wait_for, wait_preemptible_idle
from tests.e2e.helpers import (
    Preemption,
    final_weights,
    ledger,
    logs,
    notices,
    preempt_until_done,
    progress,
    restore_all,
    same_weights,
    step_reached,
    submit,
    wait_done,
)

pytest.importorskip("torch", reason="the e2e extra (torch==2.13.0) is not installed")

pytestmark = [pytest.mark.sandbox, pytest.mark.e2e]

HONOR = ["--honor-notice"]
POLL = 5.0


def assert_zero_steps_lost(folder: Path, baseline: Any) -> int:
    """Every rank saw the notice at one step; the next attempt resumed exactly there."""
    seen = [n for n in notices(folder) if n["attempt"] == 0]
    assert len(seen) == 1, seen
    step = seen[0]["step"]
    runs = progress(folder)
    assert [r["attempt"] for r in runs] == [0, 1]
    assert runs[1]["resumed_step"] == step
    assert runs[1]["resume_path"] == str(folder / "ckpt" / f"step-{step:08d}")
    assert same_weights(final_weights(folder), baseline)
    return int(step)


def test_drain_at_a_random_moment_loses_zero_steps(
    sandbox: Sandbox, baseline: Any, tmp_path: Path, rng: random.Random
) -> None:
    at_step = rng.randint(3, 35)
    slurm = CommandLineSlurm()
    wait_preemptible_idle(slurm)
    # The training waits at that step until the notice reaches it: the drain below can
    # take a whole poll interval to be seen, and the 40-step run must not end first.
    job_id = submit(tmp_path, nodes="2", extra=[*HONOR, "--hold-at", str(at_step)])
    wait_for(f"step {at_step}", (tmp_path / "ckpt" / "holding").exists, timeout=120)
    victim = slurm.job(job_id).nodes[1]  # not the batch host
    window = 30.0  # requeued seconds after the drain; the node goes once the job has left it
    (events,) = preempt_until_done(
        sandbox,
        slurm,
        job_id,
        tmp_path,
        PreemptPlan(victim, window=window, return_after=3, once_empty=True),
    )
    drained_at, removed_at = events[0].at, events[1].at
    records = ledger(tmp_path)
    notice = next(r for r in records if r["event"] == "notice")
    requeued = next(r for r in records if r["event"] == "requeued")
    assert notice["node"] == victim and notice["reason"] == "preempted"
    # Seen within one poll interval (+20 % jitter, + one scontrol call's slack).
    assert 0 <= notice["seen_at"] - drained_at <= POLL * 1.2 + 1.0, (drained_at, notice)
    # Requeued by the job itself, after the checkpoint and before the node was removed.
    assert requeued["why"] == "after the just-in-time checkpoint"
    assert requeued["requeued_at"] < removed_at
    assert requeued["requeued_at"] < drained_at + window
    step = assert_zero_steps_lost(tmp_path, baseline)
    committed = next(r for r in records if r["event"] == "committed")
    assert committed["step"] == step
    assert slurm.job(job_id).restarts == 1
    print(
        f"drain at step >= {at_step}, notice after {notice['seen_at'] - drained_at:.1f} s, "
        f"checkpoint at step {step}, requeue {requeued['requeued_at'] - drained_at:.1f} s after "
        "the drain"
    )


def test_drain_during_start_up_before_training(
    sandbox: Sandbox, baseline: Any, tmp_path: Path
) -> None:
    slurm = CommandLineSlurm()
    wait_preemptible_idle(slurm)
    # It holds before its first step until the notice is there: the drain lands in start-up.
    job_id = submit(tmp_path, nodes="2", extra=[*HONOR, "--hold-at", "0"])
    job = wait_for("the job to start", lambda: (j := slurm.job(job_id)).state == "RUNNING" and j)
    preempt_until_done(
        sandbox,
        slurm,
        job_id,
        tmp_path,
        PreemptPlan(job.nodes[0], window=30, return_after=2, once_empty=True),
    )
    step = assert_zero_steps_lost(tmp_path, baseline)
    assert step == 0


def test_drain_while_a_periodic_checkpoint_is_written(
    sandbox: Sandbox, baseline: Any, tmp_path: Path
) -> None:
    slurm = CommandLineSlurm()
    wait_preemptible_idle(slurm)
    job_id = submit(
        tmp_path,
        nodes="2",
        extra=[*HONOR, "--slow-checkpoint-at", "10", "--slow-seconds", "8"],
    )
    wait_for("the periodic write", (tmp_path / "ckpt" / "writing-checkpoint").exists, timeout=120)
    victim = slurm.job(job_id).nodes[1]
    # Requeued about 10 s after the drain (notice, the rest of the 8 s write, the save).
    preempt_until_done(
        sandbox,
        slurm,
        job_id,
        tmp_path,
        PreemptPlan(victim, window=20, return_after=2, once_empty=True),
    )
    # The periodic step-10 checkpoint completed; the script then saw the notice and
    # saved again where it stood, which is where the next attempt resumed.
    assert (tmp_path / "ckpt" / "step-00000010" / ".slurmpre-complete").exists()
    step = assert_zero_steps_lost(tmp_path, baseline)
    assert step >= 10
    committed = next(r for r in ledger(tmp_path) if r["event"] == "committed")
    assert committed["step"] == step


def test_two_nodes_drained_one_after_the_other(
    sandbox: Sandbox, baseline: Any, tmp_path: Path
) -> None:
    slurm = CommandLineSlurm()
    wait_preemptible_idle(slurm)
    job_id = submit(tmp_path, nodes="2", extra=HONOR)
    wait_for("step 5", lambda: step_reached(tmp_path) >= 5, timeout=120)
    first, second = slurm.job(job_id).nodes
    preempt_until_done(
        sandbox,
        slurm,
        job_id,
        tmp_path,
        # Requeued seconds after each drain; each node goes once the job has left it.
        PreemptPlan(first, window=20, return_after=2, once_empty=True),
        PreemptPlan(second, window=20, return_after=2, once_empty=True),
        stagger=1.0,
    )
    records = [r for r in ledger(tmp_path) if r.get("attempt") == 0]
    assert [r["event"] for r in records if r["event"] == "requeued"] == ["requeued"]
    assert next(r["first"] for r in records if r["event"] == "notice") is True
    assert_zero_steps_lost(tmp_path, baseline)


def test_notice_without_requeue_checkpoints_and_says_so(sandbox: Sandbox, tmp_path: Path) -> None:
    slurm = CommandLineSlurm()
    wait_preemptible_idle(slurm)
    job_id = submit(tmp_path, nodes="2", extra=HONOR, spec_lines=["requeue = false"])
    wait_for("step 5", lambda: step_reached(tmp_path) >= 5, timeout=120)
    victim = slurm.job(job_id).nodes[1]
    preempt_until_done(
        sandbox,
        slurm,
        job_id,
        tmp_path,
        PreemptPlan(victim, window=25, return_after=2),  # the checkpoint comes in seconds
        until_completed=False,
    )
    job = slurm.job(job_id)
    assert job.restarts == 0 and not job.requeue
    events = [r["event"] for r in ledger(tmp_path)]
    assert "requeue_skipped" in events and "requeued" not in events
    (seen,) = notices(tmp_path)
    assert (tmp_path / "ckpt" / f"step-{seen['step']:08d}" / ".slurmpre-complete").exists()
    assert "the job was submitted without --requeue: not requeuing it" in logs(tmp_path)


def test_controller_outage_of_30_s_is_no_notice(sandbox: Sandbox, tmp_path: Path) -> None:
    """slurmctld stopped for 30 s: every query of the watcher fails (several, at a 5 s
    interval, each after MessageTimeout), none is a notice, and the training goes on.
    The unit tests run a 300 s outage on a fake clock, with the back-off."""
    slurm = CommandLineSlurm()
    wait_preemptible_idle(slurm)
    steps = 70
    job_id = submit(tmp_path, nodes="2", extra=[*HONOR, "--step-seconds", "0.7"], steps=steps)
    wait_for("step 3", lambda: step_reached(tmp_path) >= 3, timeout=120)
    sandbox.stop_controller()
    try:
        at = step_reached(tmp_path)
        # Not a wait: the outage is the scene, and a negative check (no notice in it), so
        # a fixed length, from the code's own clocks: two failed queries at least, each
        # an interval apart and failing after the sandbox's MessageTimeout (30 s).
        time.sleep(2 * (POLL_INTERVAL + TUNED.message_timeout))
        assert step_reached(tmp_path) > at + 20  # training went on undisturbed
    finally:
        sandbox.start_controller()
    wait_done(slurm, job_id, tmp_path, timeout=300)
    events = [r["event"] for r in ledger(tmp_path) if r["event"] != "checkpoint"]
    assert events == ["submitted", "start", "end"]
    assert notices(tmp_path) == []
    assert [r["attempt"] for r in progress(tmp_path)] == [0]
    assert final_weights(tmp_path)["step"] == steps
    text = logs(tmp_path)
    assert "Slurm does not answer" in text
    # Backed off while it was down: a recovery is said once at most (the training may end
    # before the backed-off query that sees the controller again; the unit test with a
    # fake clock checks that it is said exactly once).
    (attempt_log,) = (tmp_path / "ckpt" / "logs").glob("*.attempt-0.out")
    assert attempt_log.read_text().count("drain: Slurm answers again after") <= 1


def test_time_limit_warning_checkpoints_and_requeues_before_the_walltime(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """Slurm's --signal (warn_before_end) takes the same path: checkpoint, requeue, resume."""
    slurm = CommandLineSlurm()
    wait_preemptible_idle(slurm)
    steps = 120
    job_id = submit(
        tmp_path,
        nodes="2",
        # The first attempt waits at step 40 for the warning: Slurm looks at time limits
        # about every 30 s, so the warning comes 60-90 s after the start, and a run short
        # enough for a test could end before it (CI saw that once). The second attempt
        # trains the last 80 steps in ~35 s, before its own warning.
        extra=[*HONOR, "--hold-at", "40"],
        steps=steps,
        # 2-minute limit, warning 60 s before it (with 90 s the warning came 26-30 s
        # after each start, and every attempt trained ~10 s: 8 attempts, 4 minutes).
        spec_lines=['time = "2"', "warn_before_end = 60", "safety_margin = 20"],
    )
    wait_done(slurm, job_id, tmp_path, timeout=600)
    records = ledger(tmp_path)
    kinds = {r["kind"] for r in records if r["event"] == "notice"}
    assert kinds == {"time-limit"}
    assert any(r["event"] == "requeued" for r in records)
    runs = progress(tmp_path)
    seen = {n["attempt"]: n["step"] for n in notices(tmp_path)}
    assert len(runs) >= 2 and slurm.job(job_id).state == "COMPLETED"
    for earlier, later in itertools.pairwise(runs):
        # Every requeue followed the checkpoint of its notice: zero steps lost.
        assert earlier["attempt"] in seen, (runs, seen)
        assert later["resumed_step"] == seen[earlier["attempt"]]
    assert not any(
        r["why"] == "deadline inside the window" for r in records if r["event"] == "requeued"
    )
    assert final_weights(tmp_path)["step"] == steps


def test_a_drain_seen_late_is_requeued_by_the_deadline_counted_from_the_drain(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """A 25 s poll interval sees the drain up to 30 s after it happened. With no checkpoint to
    wait for, the requeue comes at the deadline: drain + window - margin, from Slurm's own
    stamp of the drain, so before the node is removed however late the drain was seen."""
    slurm = CommandLineSlurm()
    wait_preemptible_idle(slurm)
    window, margin = 40, 10
    job_id = submit(
        tmp_path,
        nodes="2",
        extra=["--every", "100000"],  # no checkpoint at all: only the deadline can requeue
        steps=2000,
        spec_lines=[
            "poll_interval = 25",
            f"preempt_window = {window}",
            f"safety_margin = {margin}",
        ],
    )
    wait_for("step 3", lambda: step_reached(tmp_path) >= 3, timeout=120)
    victim = slurm.job(job_id).nodes[1]
    preemption = Preemption(
        sandbox, PreemptPlan(victim, window=window, return_after=2, once_empty=True)
    )
    preemption.start()
    try:
        requeued = wait_for(
            "the requeue",
            lambda: next((r for r in ledger(tmp_path) if r["event"] == "requeued"), None),
            timeout=window + 30,
        )
        slurm.cancel(job_id)
        drained_at = preemption.finish()[0].at
    finally:
        restore_all(sandbox)
    notice = next(r for r in ledger(tmp_path) if r["event"] == "notice")
    assert notice["deadline_from"] == "slurm"
    assert requeued["why"] == "deadline inside the window"
    # Slurm stamps to the second, so the deadline may come up to 1 s early.
    late = notice["seen_at"] - drained_at
    assert (
        window - margin - 1.5
        <= requeued["requeued_at"] - drained_at
        <= max(late, window - margin) + 2.0
    ), (drained_at, notice, requeued)
    assert requeued["requeued_at"] < drained_at + window
    print(
        f"drain seen {late:.1f} s late; requeued {requeued['requeued_at'] - drained_at:.1f} s "
        "after the drain"
    )
