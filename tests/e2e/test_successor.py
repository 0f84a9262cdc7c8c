"""End to end: restart = "successor" on the sandbox. A one-node job whose node drains,
with another preemptible node free, hands over to a new job instead of being requeued:
it commits its notice checkpoint, the successor (not on the draining node) waits for
it to end, resumes there, and the run ends bit for bit as an uninterrupted one.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.sandbox.preempt import PreemptPlan
from slurmpre.slurm.client import CommandLineSlurm

from tests.conftest import PREEMPTIBLE, slurmpre_cli, wait_for, wait_preemptible_idle
from tests.e2e.helpers import (
    Preemption,
    final_weights,
    jsonl,
    ledger,
    notices,
    progress,
    restore_all,
    same_weights,
    submit,
    successor_of,
    wait_done,
)

pytest.importorskip("torch", reason="the e2e extra (torch==2.13.0) is not installed")

pytestmark = [pytest.mark.sandbox, pytest.mark.e2e]


def test_a_drained_one_node_job_hands_over_to_a_successor_and_loses_nothing(
    sandbox: Sandbox, baseline: Any, tmp_path: Path
) -> None:
    slurm, job_id, victim = held_job(tmp_path, 12)
    preemption = Preemption(
        sandbox, PreemptPlan(victim, window=60, return_after=3, once_empty=True)
    )
    preemption.start()
    try:
        successor = str(wait_for("the hand-over", lambda: successor_of(tmp_path), timeout=90))
        wait_done(slurm, successor, tmp_path, timeout=240)
        events = preemption.finish()
    finally:
        restore_all(sandbox)
    drained_at = events[0].at
    predecessor = slurm.job(job_id)
    # Ended, not requeued: it could not be (Requeue=0 before the hand-over).
    assert predecessor.state == "COMPLETED" and predecessor.restarts == 0
    assert not predecessor.requeue
    (seen,) = notices(tmp_path)
    runs = progress(tmp_path)
    assert len(runs) == 2 and runs[1]["resumed_step"] == seen["step"]  # zero steps lost
    assert same_weights(final_weights(tmp_path), baseline)
    records = ledger(tmp_path)
    notice = next(r for r in records if r["event"] == "notice")
    hand_over = next(r for r in records if r["event"] == "successor")
    assert hand_over["excluded"] == [victim] and hand_over["job"] == job_id
    starts = [r for r in records if r["event"] == "start"]
    assert [s["job"] for s in starts] == [job_id, successor]
    assert victim not in starts[1]["nodes"]
    # The successor chose its checkpoint only once its predecessor had ended.
    assert starts[1]["time"] >= next(
        r["time"] for r in records if r["event"] == "end" and r["job"] == job_id
    )
    # Nothing of it is left in the queue: no requeued twin, no second successor.
    left = [j for j in slurm.jobs() if j.job_id in (job_id, successor) and not j.finished]
    assert left == []
    print(
        f"drain -> notice {notice['seen_at'] - drained_at:.1f} s; successor {successor} "
        f"submitted {hand_over['submitted_at'] - drained_at:.1f} s after the drain, trained "
        f"again {runs[1]['started_at'] - drained_at:.1f} s after it (tuned timings)"
    )


def held_job(
    tmp_path: Path, at_step: int, extra: list[str] | None = None, lines: list[str] | None = None
) -> tuple[CommandLineSlurm, str, str]:
    """A one-node successor job of train_tiny.py (a step a second with ``--step-seconds 1``),
    held at ``at_step`` until its notice: the client, the job and its node."""
    slurm = CommandLineSlurm()
    wait_preemptible_idle(slurm)
    job_id = submit(
        tmp_path,
        nodes="1",
        extra=["--honor-notice", "--hold-at", str(at_step), *(extra or [])],
        spec_lines=['restart = "successor"', "poll_interval = 1", *(lines or [])],
    )
    wait_for(f"step {at_step}", (tmp_path / "ckpt" / "holding").exists, timeout=120)
    return slurm, job_id, slurm.job(job_id).nodes[0]


def _one(records: list[dict[str, Any]], event: str, job: str) -> dict[str, Any]:
    (found,) = [r for r in records if r["event"] == event and r["job"] == job]
    return found


def test_with_a_free_node_the_successor_starts_up_while_the_predecessor_trains_on(
    sandbox: Sandbox, baseline: Any, tmp_path: Path
) -> None:
    """Make before break: the predecessor saves at the notice and trains on; the successor
    starts up beside it on the free node, and once it waits in resume_path() the
    predecessor takes a last checkpoint and ends; the successor resumes from that one."""
    at_step = 12
    slurm, job_id, victim = held_job(tmp_path, at_step, ["--go-on", "--step-seconds", "1"])
    folder = tmp_path / "ckpt"
    preemption = Preemption(
        sandbox, PreemptPlan(victim, window=90, return_after=3, once_empty=True)
    )
    preemption.start()
    try:
        successor = str(wait_for("the hand-over", lambda: successor_of(tmp_path), timeout=90))
        wait_done(slurm, successor, tmp_path, timeout=240)
        events = preemption.finish()
    finally:
        restore_all(sandbox)
    drained_at = events[0].at
    (saved,) = jsonl(folder / "notice-checkpoints.jsonl")
    (stopped,) = notices(tmp_path)
    # Saved at once (the ranks agree within about a second of steps)...
    assert at_step <= saved["step"] <= at_step + 2 and saved["job"] == job_id
    assert stopped["step"] > at_step  # ...and trained on after it
    runs = progress(tmp_path)
    assert len(runs) == 2 and runs[1]["resumed_step"] == stopped["step"]  # zero steps lost
    assert same_weights(final_weights(tmp_path), baseline)
    records = ledger(tmp_path)
    waiting = _one(records, "waiting", successor)
    stopping = _one(records, "stopping", job_id)
    end = next(r for r in records if r["event"] == "end" and r["job"] == job_id)
    start = _one(records, "start", successor)
    assert waiting["predecessor"] == job_id and "ready to take over" in stopping["why"]
    # The overlap: the successor was started up and waiting while the predecessor trained;
    # it chose its checkpoint only once the predecessor had ended.
    assert waiting["time"] < end["time"] <= start["time"]
    assert waiting["time"] < stopped["at"]
    predecessor = slurm.job(job_id)
    assert predecessor.state == "COMPLETED" and predecessor.restarts == 0
    left = [j for j in slurm.jobs() if j.job_id in (job_id, successor) and not j.finished]
    assert left == []
    print(
        f"timeline from the drain (tuned): notice checkpoint {saved['at'] - drained_at:.1f} s, "
        f"successor waiting {waiting['waiting_at'] - drained_at:.1f} s, predecessor's last "
        f"checkpoint {stopped['at'] - drained_at:.1f} s (step {stopped['step']}), trained "
        f"again {runs[1]['started_at'] - drained_at:.1f} s; training time lost "
        f"{runs[1]['started_at'] - stopped['at']:.1f} s"
    )


def test_with_no_free_node_the_predecessor_trains_on_until_its_deadline(
    sandbox: Sandbox, baseline: Any, tmp_path: Path
) -> None:
    """No node for the successor: the predecessor keeps training after its notice
    checkpoint, stops with a last one before its deadline, and the successor (pending
    meanwhile) takes over from that one when a node returns."""
    at_step = 12
    slurm, job_id, victim = held_job(
        tmp_path,
        at_step,
        ["--go-on", "--step-seconds", "1"],
        ["preempt_window = 30", "safety_margin = 5"],
    )
    folder = tmp_path / "ckpt"
    (other,) = [n.name for n in slurm.nodes(PREEMPTIBLE) if n.name != victim]
    blocker = slurm.submit(
        "#!/bin/bash\nsleep 600\n",
        args=[f"--nodelist={other}", "--exclusive", "--job-name=blocker"],
    )
    wait_for("the blocker to run", lambda: slurm.job(blocker).state == "RUNNING", timeout=60)
    preemption = Preemption(
        sandbox, PreemptPlan(victim, window=30, return_after=3, once_empty=True)
    )
    preemption.start()
    try:
        successor = str(wait_for("the hand-over", lambda: successor_of(tmp_path), timeout=90))
        wait_for(f"job {job_id} to end", lambda: slurm.job(job_id).finished, timeout=120)
        assert slurm.job(successor).state == "PENDING"  # no node for it yet
        slurm.cancel(blocker)  # a node returns
        wait_done(slurm, successor, tmp_path, timeout=240)
        events = preemption.finish()
    finally:
        with contextlib.suppress(Exception):
            slurm.cancel(blocker)
        restore_all(sandbox)
    drained_at = events[0].at
    (saved,) = jsonl(folder / "notice-checkpoints.jsonl")
    (stopped,) = notices(tmp_path)
    assert at_step <= saved["step"] <= at_step + 2
    # It trained on for most of its window: 25 s to the deadline, at a step a second.
    assert stopped["step"] >= at_step + 10
    assert stopped["at"] - drained_at < 25
    stopping = _one(ledger(tmp_path), "stopping", job_id)
    assert stopping["why"] == "the deadline nears"
    runs = progress(tmp_path)
    assert len(runs) == 2 and runs[1]["resumed_step"] == stopped["step"]  # zero steps lost
    assert same_weights(final_weights(tmp_path), baseline)
    print(
        f"no free node (tuned): notice checkpoint {saved['at'] - drained_at:.1f} s after the "
        f"drain, trained on to step {stopped['step']} ({stopped['at'] - drained_at:.1f} s); "
        f"successor trained again {runs[1]['started_at'] - stopped['at']:.1f} s after that"
    )


def test_with_the_local_tier_the_successor_pulls_the_notice_save_from_the_drained_node(
    sandbox: Sandbox, baseline: Any, tmp_path: Path
) -> None:
    """local_dir = "auto": the notice checkpoint is saved on the node; the successor's
    node pulls it from the drained node's wrapper (which serves it while its flush to the
    folder goes on), resumes from its own copy, and its flush commits it in the folder."""
    slurm, job_id, victim = held_job(tmp_path, 12, lines=['local_dir = "auto"'])
    preemption = Preemption(
        sandbox, PreemptPlan(victim, window=60, return_after=3, once_empty=True)
    )
    preemption.start()
    try:
        successor = str(wait_for("the hand-over", lambda: successor_of(tmp_path), timeout=90))
        wait_done(slurm, successor, tmp_path, timeout=240)
        preemption.finish()
    finally:
        restore_all(sandbox)
    (seen,) = notices(tmp_path)
    runs = progress(tmp_path)
    assert len(runs) == 2 and runs[1]["resumed_step"] == seen["step"]  # zero steps lost
    assert same_weights(final_weights(tmp_path), baseline)
    records = ledger(tmp_path)
    saved = [r for r in records if r["event"] == "saved" and r["job"] == job_id]
    assert saved[-1]["after_notice"] and saved[-1]["step"] == seen["step"]
    done = _one(records, "pull_done", successor)
    assert done["ok"] and done["predecessor"] == job_id and done["step"] == seen["step"]
    (pulled,) = [r for r in records if r["event"] == "pulled" and r["job"] == successor]
    assert pulled["ok"] and pulled["bytes"] > 0
    start = _one(records, "start", successor)
    folder = tmp_path / "ckpt"
    assert start["resume_from"] == str(folder / f"step-{seen['step']:08d}")
    # It trained from its own copy on its node, not from the folder.
    assert not runs[1]["resume_path"].startswith(str(folder))
    flushed = [r for r in records if r["event"] == "checkpoint" and r["step"] == seen["step"]]
    assert flushed and flushed[-1]["flush_seconds"] is not None
    assert (folder / f"step-{seen['step']:08d}").is_dir()
    shown = slurmpre_cli("status", job_id, check=True).stdout
    assert f"step {seen['step']}: saved on job {job_id}'s nodes (" in shown
    assert f"pulled by job {successor}, in the folder (flushed in " in shown
    print(
        f"pulled step {done['step']}: {pulled['bytes']} bytes in {pulled['seconds']:.2f} s; "
        f"trained again {runs[1]['started_at'] - seen['at']:.1f} s after the notice (tuned)"
    )
