"""End to end (#36): hot spares. A one-node job with ``spare_nodes = 2`` holds all three
sandbox nodes and trains on one; the spares are the batch host and the last node.

1. The spare that is not the batch host drains: the supervisor releases it from the job
   while the training goes on (no notice, no checkpoint asked, no restart).
2. The training node is preempted the provider's way (drain, then removal): every rank
   checkpoints, and the batch host, held as a spare, takes its place inside the same
   allocation, make before break: the next step starts there at once, beside the
   training, which goes on after its notice checkpoint until that step waits in
   `resume_path()`, then stops at a last checkpoint that the next step resumes from. The
   world size stays 1, no step is lost, the job is never requeued nor handed over, and
   the run ends bit for bit as an uninterrupted one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.sandbox.preempt import PreemptPlan
from slurmpre.slurm.client import CommandLineSlurm

from tests.conftest import PREEMPTIBLE, wait_for, wait_preemptible_idle
from tests.e2e.helpers import (
    Preemption,
    final_weights,
    jsonl,
    ledger,
    logs,
    notices,
    progress,
    restore_all,
    same_weights,
    submit,
    wait_done,
)

pytest.importorskip("torch", reason="the e2e extra (torch==2.13.0) is not installed")

pytestmark = [pytest.mark.sandbox, pytest.mark.e2e]


def _event(folder: Path, name: str) -> dict[str, Any] | None:
    return next((r for r in ledger(folder) if r["event"] == name), None)


def _held(tmp_path: Path, *lines: str) -> tuple[CommandLineSlurm, str, str, str, str]:
    """A one-node job holding the three sandbox nodes, two as spares, at its step 12: the
    client, the job, its batch host (a spare), the node that trains, the other spare."""
    slurm = CommandLineSlurm()
    wait_preemptible_idle(slurm)
    wait_for(
        "every node idle",
        lambda: all(n.state == "IDLE" and not n.draining for n in slurm.nodes()),
        timeout=120,
    )
    job = submit(
        tmp_path,
        nodes="1",
        # A step a second: the 28 steps after the hold outlast the next step's start on the
        # spare on a loaded machine (at 0.25 s the training finished before it was told to
        # stop, and recorded no notice).
        extra=["--honor-notice", "--go-on", "--hold-at", "12", "--step-seconds", "1"],
        spec_lines=[
            'restart = "successor"',
            'constraint = ""',  # the standard node too: three nodes, one trains
            "spare_nodes = 2",
            "poll_interval = 1",
            *lines,
        ],
    )
    wait_for("step 12", (tmp_path / "ckpt" / "holding").exists, timeout=120)
    start = _event(tmp_path, "start")
    assert start is not None
    held = slurm.job(job)
    batch_host = held.batch_host
    assert batch_host is not None, held
    (training,) = start["nodes"]
    assert len(held.nodes) == 3 and sorted(start["spares"]) == sorted(
        n for n in held.nodes if n != training
    )
    assert batch_host in start["spares"], (batch_host, start)
    # The training node must be one the provider preempts (the test preempts it).
    assert training in PREEMPTIBLE, (training, start, logs(tmp_path)[-3000:])
    (other,) = [n for n in start["spares"] if n != batch_host]
    return slurm, job, batch_host, str(training), str(other)


def _preempt(
    sandbox: Sandbox, slurm: CommandLineSlurm, job: str, training: str, tmp_path: Path
) -> None:
    """The training node is preempted the provider's way (drain, then removal); the job ends."""
    preemption = Preemption(sandbox, PreemptPlan(training, window=60, once_empty=True))
    preemption.start()
    wait_done(slurm, job, tmp_path, timeout=300)
    preemption.finish()


def _swapped(tmp_path: Path, training: str, batch_host: str) -> tuple[list[dict[str, Any]], str]:
    """The ledger and the logs' end, once the batch host, a spare, took the drained node's
    place in the same job."""
    where = logs(tmp_path)[-4000:]
    swap = _event(tmp_path, "in_place")
    assert swap is not None, where
    assert (swap["released"], swap["kept"], swap["spares_in"]) == (
        [training],
        [batch_host],
        [batch_host],
    ), where
    return ledger(tmp_path), where


def test_a_spare_is_released_when_it_drains_and_takes_a_preempted_nodes_place(
    sandbox: Sandbox, baseline: Any, tmp_path: Path
) -> None:
    try:
        slurm, job, batch_host, training, other = _held(tmp_path)

        # 1. The other spare drains: released from the job, the training goes on.
        slurm.update_node(other, state="DRAIN", reason="preempted")
        released = wait_for(
            "the spare's release", lambda: _event(tmp_path, "spare_released"), timeout=60
        )
        assert released["released"] == [other] and released.get("error") is None
        assert other not in slurm.job(job).nodes
        assert _event(tmp_path, "notice") is None  # nothing was asked of the training
        slurm.update_node(other, state="RESUME")

        # 2. The training node is preempted: the batch host, a spare, takes its place.
        _preempt(sandbox, slurm, job, training, tmp_path)
    finally:
        restore_all(sandbox)
    records, where = _swapped(tmp_path, training, batch_host)
    starts = [r for r in records if r["event"] == "start"]
    assert [(s["nodes"], s.get("in_place", 0)) for s in starts] == [
        ([training], 0),
        ([batch_host], 1),
    ], where
    assert not any(r["event"] in ("successor", "requeued") for r in records), where
    runs = progress(tmp_path)
    assert [(r["world"], r["previous_world"]) for r in runs] == [(1, None), (1, 1)], where
    (seen,) = notices(tmp_path)
    assert runs[1]["resumed_step"] == seen["step"] >= 12, where  # zero steps lost
    # Make before break in place: asked early, the next step waited for the training, which
    # trained on after its notice checkpoint until told to stop, and only then stopped.
    asked = [r for r in records if r["event"] == "in_place_requested"]
    assert [r.get("early") for r in asked] == [True, None], where
    waited = [r for r in records if r["event"] == "waiting"]
    assert [(w.get("in_place"), w["predecessor"]) for w in waited] == [(1, job)], where
    stopping = next(r for r in records if r["event"] == "stopping")
    assert "started beside this one" in stopping["why"], where
    assert stopping["asked_at"] >= waited[0]["waiting_at"], where
    (noticed,) = jsonl(tmp_path / "ckpt" / "notice-checkpoints.jsonl")
    assert seen["step"] >= noticed["step"], where
    assert same_weights(final_weights(tmp_path), baseline)
    done = slurm.job(job)
    assert done.state == "COMPLETED" and done.restarts == 0  # one job, never requeued


def test_with_the_local_tier_the_spare_pulls_the_last_save_from_the_drained_node(
    sandbox: Sandbox, baseline: Any, tmp_path: Path
) -> None:
    """local_dir = "auto": the drained step's last save is on its node; the step started
    beside it on the spare pulls it from there before the drained node goes, trains from
    its own copy, and its flush commits it in the folder: no wait for the drained step's
    flush (docs/local-tier.md, 4)."""
    try:
        slurm, job, batch_host, training, _ = _held(tmp_path, 'local_dir = "auto"')
        _preempt(sandbox, slurm, job, training, tmp_path)
    finally:
        restore_all(sandbox)
    records, where = _swapped(tmp_path, training, batch_host)
    runs = progress(tmp_path)
    assert [(r["world"], r["previous_world"]) for r in runs] == [(1, None), (1, 1)], where
    (seen,) = notices(tmp_path)
    step = seen["step"]
    assert runs[1]["resumed_step"] == step >= 12, where  # zero steps lost
    saved = [r for r in records if r["event"] == "saved" and r.get("in_place", 0) == 0]
    assert saved[-1]["after_notice"] and saved[-1]["step"] == step, where
    # This step's node 0 had the next step's node pull it, and waited for that, not the flush.
    (done,) = [r for r in records if r["event"] == "pull_done"]
    assert done["ok"] and (done["job"], done.get("in_place", 0), done["step"]) == (job, 0, step)
    (asked,) = [r for r in records if r["event"] == "pull_asked"]
    assert (asked.get("in_place"), asked["pullers"], len(asked["sources"])) == (1, [0], 1)
    (pulled,) = [r for r in records if r["event"] == "pulled"]
    assert pulled["ok"] and pulled["bytes"] > 0 and pulled.get("in_place") == 1, where
    assert "pulled onto the next step's node(s)" in logs(tmp_path), where
    folder = tmp_path / "ckpt"
    next_start = [r for r in records if r["event"] == "start"][-1]
    assert next_start["resume_from"] == str(folder / f"step-{step:08d}"), where
    assert not runs[1]["resume_path"].startswith(str(folder)), where  # its own copy
    # In the folder too: by this step's flush if it came first, else by the next step's.
    assert [r for r in records if r["event"] == "checkpoint" and r["step"] == step], where
    assert (folder / f"step-{step:08d}").is_dir()
    assert same_weights(final_weights(tmp_path), baseline)
    done_job = slurm.job(job)
    assert done_job.state == "COMPLETED" and done_job.restarts == 0
    print(f"pulled step {step}: {pulled['bytes']} bytes in {pulled['seconds']:.2f} s (tuned)")
