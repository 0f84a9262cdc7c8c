"""End to end: real torchrun (gloo, CPU torch) on two sandbox nodes, preempted the provider's way.

Each test trains the tiny deterministic model of train_tiny.py through a
generated sbatch script and `slurmpre.job run`, preempts a node with the
sandbox, and compares the final weights with an uninterrupted run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.sandbox.preempt import PreemptPlan
from slurmpre.slurm.client import CommandLineSlurm

from tests.conftest import wait_for
from tests.e2e.helpers import (
    final_weights,
    logs,
    preempt_until_done,
    progress,
    same_weights,
    step_reached,
    submit,
)

pytest.importorskip("torch", reason="the e2e extra (torch==2.13.0) is not installed")

pytestmark = [pytest.mark.sandbox, pytest.mark.e2e]


def test_preempted_run_resumes_and_matches_bit_for_bit(
    sandbox: Sandbox, baseline: Any, tmp_path: Path
) -> None:
    slurm = CommandLineSlurm()
    job_id = submit(tmp_path, nodes="2")
    wait_for("step 12", lambda: step_reached(tmp_path) >= 12, timeout=120)
    victim = slurm.job(job_id).nodes[1]
    preempt_until_done(
        sandbox, slurm, job_id, tmp_path, PreemptPlan(victim, window=2, return_after=1)
    )
    runs = progress(tmp_path)
    assert [r["attempt"] for r in runs] == [0, 1]
    resumed = runs[1]["resumed_step"]
    assert isinstance(resumed, int) and resumed >= 10 and resumed % 5 == 0
    assert runs[1]["resume_path"] == str(tmp_path / "ckpt" / f"step-{resumed:08d}")
    assert slurm.job(job_id).restarts == 1
    assert same_weights(final_weights(tmp_path), baseline)


def test_kill_during_a_checkpoint_write_resumes_from_the_previous_one(
    sandbox: Sandbox, baseline: Any, tmp_path: Path
) -> None:
    slurm = CommandLineSlurm()
    job_id = submit(tmp_path, nodes="2", extra=["--slow-checkpoint-at", "10"])
    marker = tmp_path / "ckpt" / "writing-checkpoint"
    wait_for("the slow checkpoint write", marker.exists, timeout=120)
    victim = slurm.job(job_id).nodes[0]  # the batch host, mid-write
    preempt_until_done(
        sandbox, slurm, job_id, tmp_path, PreemptPlan(victim, window=0, return_after=1)
    )
    runs = progress(tmp_path)
    assert [(r["attempt"], r["resumed_step"]) for r in runs] == [(0, 0), (1, 5)]
    # The half-written step 10 was never published; the next attempt cleared it away
    # (it was never complete) and said so.
    assert not list((tmp_path / "ckpt").glob(".incoming-step-00000010-*"))
    assert "leftover(s) of dead attempts: .incoming-step-00000010-" in logs(tmp_path)
    assert same_weights(final_weights(tmp_path), baseline)
