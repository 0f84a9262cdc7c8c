"""End to end (#36): one run whose world size changes, grown and shrunk, and whose training
keeps its meaning. A ``nodes = "1-2"`` job with two ranks per node (torchrun) trains the
elastic trainer (`elastic_train.py`: slurmpre's `ElasticSampler`, a global batch of 12):

    1 node (2 ranks)  --the other node returns: grow-->    2 nodes (4 ranks)
    --a node is preempted: shrink in place-->  1 node (2 ranks)
    --it returns: grow-->  2 nodes (4 ranks)

The trainer's own logs show every sample of every epoch trained exactly once, each
optimizer step on 12 samples (the accumulation set for each world size), and the final
weights are bit for bit those of an uninterrupted run with the same global batch (the
trainer sums the per-sample gradients in the global batch's order, whatever the world:
the reduction order does not depend on it).

On a sandbox with four preemptible nodes or more the same scenes run on ``"2-4"``
(2 -> 4 -> 3 -> 4 nodes); the three-node sandbox the suite runs has two.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.sandbox.preempt import PreemptPlan
from slurmpre.slurm.client import CommandLineSlurm

from tests.conftest import slurmpre_cli, wait_for, wait_preemptible_idle
from tests.e2e.helpers import Preemption, jsonl, logs, restore_all, write_spec

pytest.importorskip("torch", reason="the e2e extra (torch==2.13.0) is not installed")

pytestmark = [pytest.mark.sandbox, pytest.mark.e2e]

TRAIN = Path(__file__).parent / "elastic_train.py"
STEPS = 40  # five epochs of 96 samples, 12 a step
HOLDS = (4, 12, 20)  # where each attempt waits for the capacity change the test makes


def _begins(folder: Path) -> list[dict[str, Any]]:
    return jsonl(folder / "ckpt" / "progress.jsonl")


def _preemptible(slurm: CommandLineSlurm) -> list[str]:
    return sorted(n.name for n in slurm.nodes() if "preemptible" in n.features)


def test_a_run_grown_and_shrunk_sees_every_sample_once_with_a_constant_global_batch(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    slurm = CommandLineSlurm()
    wait_preemptible_idle(slurm)
    nodes = _preemptible(slurm)
    # 2 -> 4 -> 3 -> 4 nodes of one rank, or 1 -> 2 -> 1 -> 2 nodes of two (a global batch
    # of 12 splits over every one of these worlds).
    low = 2 if len(nodes) >= 4 else 1
    high, per_node = 2 * low, 2 // low
    expected = [per_node * n for n in (low, high, high - 1, high)]  # ranks, attempt by attempt
    away = nodes[low:high]  # capacity not yet back: the job starts on `low` nodes
    for node in away:
        slurm.update_node(node, state="DRAIN", reason="capacity not yet back")
    spec = write_spec(
        tmp_path, "elastic",
        [sys.executable, str(TRAIN), "--steps", str(STEPS), "--hold", ",".join(map(str, HOLDS))],
        ['restart = "successor"', "poll_interval = 1", "grow_settle = 4",
         f"nproc_per_node = {per_node}"],
        nodes=f"{low}-{high}",
    )  # fmt: skip
    folder = tmp_path / "ckpt"

    def holding(step: int, world: int) -> bool:
        begun = _begins(tmp_path)
        return bool(begun) and begun[-1]["world"] == world and (folder / f"holding-{step}").exists()

    preemption = None
    try:
        slurmpre_cli("submit", str(spec), check=True)
        wait_for(f"{expected[0]} ranks at step 4", lambda: holding(4, expected[0]), timeout=180,
                 why=lambda: logs(tmp_path)[-3000:])  # fmt: skip
        for node in away:  # capacity back: it grows
            slurm.update_node(node, state="RESUME")
        wait_for(f"{expected[1]} ranks at step 12", lambda: holding(12, expected[1]), timeout=240,
                 why=lambda: logs(tmp_path)[-3000:])  # fmt: skip
        job = _begins(tmp_path)[-1]["job"]
        held = slurm.job(job)
        victim = next(n for n in held.nodes if n != held.batch_host)
        preemption = Preemption(
            sandbox, PreemptPlan(victim, window=60, return_after=10, once_empty=True)
        )
        preemption.start()  # a node is taken: it shrinks in place, then grows when it is back
        wait_for(f"{expected[2]} ranks at step 20", lambda: holding(20, expected[2]), timeout=240,
                 why=lambda: logs(tmp_path)[-3000:])  # fmt: skip
        wait_for("the run's end", (folder / "final.pt").exists, timeout=400,
                 why=lambda: logs(tmp_path)[-3000:])  # fmt: skip
        preemption.finish()
    finally:
        restore_all(sandbox)
    where = logs(tmp_path)[-4000:]
    begun = _begins(tmp_path)
    worlds = [b["world"] for b in begun]
    assert worlds == [per_node * low, per_node * high, per_node * (high - 1), per_node * high], (
        where
    )
    assert [b["previous_world"] for b in begun] == [None, *worlds[:-1]], where
    assert [b["resumed_step"] for b in begun] == [0, *HOLDS], where  # no step lost
    assert [b["accumulation"] for b in begun] == [12 // w for w in worlds], where
    # The steps that count: each attempt's, up to where the next one resumed.
    ends = [b["resumed_step"] for b in begun[1:]] + [STEPS]
    trained = jsonl(folder / "samples.jsonl")
    counted: dict[int, list[int]] = {}
    for b, end in zip(begun, ends, strict=True):
        tag = (b["job"], b["attempt"], b["in_place"])
        for r in trained:
            if (r["job"], r["attempt"], r["in_place"]) == tag and r["step"] < end:
                assert r["world"] == b["world"]
                counted.setdefault(r["step"], []).extend(r["samples"])
    assert sorted(counted) == list(range(STEPS)), where  # every step once
    assert all(len(s) == 12 for s in counted.values())  # the global batch held
    for epoch in range(STEPS * 12 // 96):
        seen = Counter(i for step in range(epoch * 8, epoch * 8 + 8) for i in counted[step])
        assert seen == Counter(range(96)), (epoch, seen)  # every sample exactly once
    final = _final(folder)
    assert final["step"] == STEPS and final["w"].equal(_uninterrupted()), where


def _final(folder: Path) -> Any:
    import torch

    return torch.load(folder / "final.pt")


def _uninterrupted() -> Any:
    """The same training on one rank, in this process: the weights every world must end on."""
    import slurmpre
    import torch

    sys.path.insert(0, str(TRAIN.parent))
    try:
        import elastic_train as t
    finally:
        sys.path.pop(0)
    x, y = t.data()
    sampler = slurmpre.ElasticSampler(t.SIZE, t.GLOBAL, t.MICRO, seed=3, rank=0, world_size=1)
    w = torch.zeros(t.DIM, dtype=torch.float64)
    for step in range(STEPS):
        mine = [i for batch in sampler.step_indices(step * t.GLOBAL) for i in batch]
        rows = torch.stack([2 * x[i] * (x[i] @ w - y[i]) for i in mine])
        w = w - t.LR * torch.cat([rows]).sum(dim=0) / t.GLOBAL
    return w
