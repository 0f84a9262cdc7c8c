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


def test_a_spare_is_released_when_it_drains_and_takes_a_preempted_nodes_place(
    sandbox: Sandbox, baseline: Any, tmp_path: Path
) -> None:
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
        ],
    )
    preemption = None
    try:
        wait_for("step 12", (tmp_path / "ckpt" / "holding").exists, timeout=120)
        start = _event(tmp_path, "start")
        assert start is not None
        held = slurm.job(job)
        batch_host = held.batch_host
        (training,) = start["nodes"]
        assert len(held.nodes) == 3 and sorted(start["spares"]) == sorted(
            n for n in held.nodes if n != training
        )
        assert batch_host in start["spares"], (batch_host, start)
        # The training node must be one the provider preempts (the test preempts it).
        assert training in PREEMPTIBLE, (training, start, logs(tmp_path)[-3000:])
        (other,) = [n for n in start["spares"] if n != batch_host]

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
        preemption = Preemption(sandbox, PreemptPlan(training, window=60, once_empty=True))
        preemption.start()
        wait_done(slurm, job, tmp_path, timeout=300)
        preemption.finish()
    finally:
        restore_all(sandbox)
    records = ledger(tmp_path)
    where = logs(tmp_path)[-4000:]
    swap = _event(tmp_path, "in_place")
    assert swap is not None, where
    assert (swap["released"], swap["kept"], swap["spares_in"]) == (
        [training],
        [batch_host],
        [batch_host],
    ), where
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
