"""End to end: the README's training loop (examples/train_loop.py, run as is) drained
mid-run on the sandbox trains every step exactly once across its jobs, and every
checkpoint it leaves named N holds the state after exactly N steps, whether the
notice or the periodic branch saved it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from slurmpre.folder import checkpoints
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.sandbox.preempt import PreemptPlan
from slurmpre.slurm.client import CommandLineSlurm

from tests.conftest import slurmpre_cli, wait_for, wait_preemptible_idle
from tests.e2e.helpers import (
    Preemption,
    jsonl,
    ledger,
    logs,
    restore_all,
    successor_of,
    wait_done,
    write_spec,
)

torch = pytest.importorskip("torch", reason="the e2e extra (torch==2.13.0) is not installed")

pytestmark = [pytest.mark.sandbox, pytest.mark.e2e]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_loop.py"
STEPS, EVERY = 60, 7  # 60 is no multiple of 7: the last periodic save is at 56


def reference(steps: int) -> object:
    """The example's weights after ``steps`` steps on one process, computed here."""
    w = torch.zeros(8, dtype=torch.float64)
    for step in range(steps):
        x = torch.randn(1, 8, generator=torch.Generator().manual_seed(step), dtype=torch.float64)[0]
        w -= 0.01 * (2 * (x @ w - x.sum()) * x)
    return w


def test_the_readmes_loop_drained_trains_every_step_once(sandbox: Sandbox, tmp_path: Path) -> None:
    slurm = CommandLineSlurm()
    wait_preemptible_idle(slurm)
    log = tmp_path / "steps.jsonl"
    args = ["--steps", str(STEPS), "--every", str(EVERY), "--step-seconds", "0.5"]
    spec = write_spec(
        tmp_path,
        "readme-loop",
        [sys.executable, str(EXAMPLE), *args, "--log", str(log)],
        ['restart = "successor"', "poll_interval = 1"],
        nodes="1",
    )
    job_id = slurmpre_cli("submit", str(spec), check=True).stdout.strip()
    wait_for("ten steps", lambda: len(jsonl(log)) >= 10, timeout=180)
    (victim,) = slurm.job(job_id).nodes
    preemption = Preemption(
        sandbox, PreemptPlan(victim, window=60, return_after=3, once_empty=True)
    )
    preemption.start()
    try:
        successor = wait_for("the hand-over", lambda: successor_of(tmp_path), timeout=90)
        wait_done(slurm, successor, tmp_path, timeout=240)
        preemption.finish()
    finally:
        restore_all(sandbox)
    trained = jsonl(log)
    assert [t["step"] for t in trained] == list(range(STEPS)), logs(tmp_path)[-4000:]
    assert {t["restart"] for t in trained} == {0, 1}  # across the two jobs
    # Every checkpoint named N holds N steps: the notice's and the periodic ones alike.
    saved = [c for c in checkpoints.list_all(tmp_path / "ckpt") if c.complete]
    notice = [r for r in ledger(tmp_path) if r["event"] == "checkpoint" and r["after_notice"]]
    assert len(notice) == 1 and notice[0]["step"] % EVERY != 0  # not also a periodic step
    steps = sorted(c.step for c in saved)
    assert notice[0]["step"] in steps and EVERY * (STEPS // EVERY) in steps
    for c in saved:
        got = {"w": torch.zeros(8, dtype=torch.float64)}
        import torch.distributed.checkpoint as dcp

        dcp.load(got, checkpoint_id=c.where, no_dist=True)
        assert torch.equal(got["w"], reference(c.step)), f"{c.where} is not {c.step} steps"
    print(f"steps trained once each: {STEPS}; checkpoints checked: {steps}")
