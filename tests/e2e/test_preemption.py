"""End to end: real torchrun (gloo, CPU torch) on two sandbox nodes, preempted the provider's way.

Each test trains the tiny deterministic model of train_tiny.py through a
generated sbatch script and `slurmpre.job run`, preempts a node with the
sandbox, and compares the final weights with an uninterrupted run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.sandbox.preempt import PreemptPlan, preempt, restore_node
from slurmpre.slurm.client import CommandLineSlurm

from tests.conftest import slurmpre_cli, wait_for

torch = pytest.importorskip("torch", reason="the e2e extra (torch==2.13.0) is not installed")

pytestmark = [pytest.mark.sandbox, pytest.mark.e2e]

TRAIN = Path(__file__).parent / "train_tiny.py"
STEPS = 40
PREEMPTIBLE = ["gpu-preemptible-dp-1", "gpu-preemptible-dp-2"]


def submit(folder: Path, *, nodes: str, extra: list[str] = ()) -> str:  # type: ignore[assignment]
    spec = folder / "tiny.toml"
    command = [sys.executable, str(TRAIN), "--steps", str(STEPS), "--every", "5", *extra]
    spec.write_text(
        "\n".join(
            [
                'name = "tiny"',
                f"command = {json.dumps(command)}",
                f'nodes = "{nodes}"',
                f"checkpoint_dir = {json.dumps(str(folder / 'ckpt'))}",
                "[env]",
                'GLOO_SOCKET_IFNAME = "lo"',
            ]
        )
        + "\n"
    )
    return slurmpre_cli("submit", str(spec), check=True).stdout.strip()


def wait_done(slurm: CommandLineSlurm, job_id: str, folder: Path, timeout: float = 240) -> None:
    wait_for(f"job {job_id} to finish", lambda: slurm.job(job_id).finished, timeout=timeout)
    job = slurm.job(job_id)
    if job.state != "COMPLETED":
        logs = "\n".join(p.read_text()[-3000:] for p in (folder / "ckpt" / "logs").glob("*.out"))
        pytest.fail(f"job {job_id} ended {job.state}:\n{logs}")


def progress(folder: Path) -> list[dict[str, object]]:
    text = (folder / "ckpt" / "progress.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


def step_reached(folder: Path) -> int:
    try:
        return int((folder / "ckpt" / "progress-step").read_text() or 0)
    except (OSError, ValueError):
        return 0


def final_weights(folder: Path) -> object:
    return torch.load(folder / "ckpt" / "final.pt")


@pytest.fixture(scope="module")
def baseline(
    sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, object]]:
    folder = tmp_path_factory.mktemp("baseline")
    slurm = CommandLineSlurm()
    job_id = submit(folder, nodes="2")
    wait_done(slurm, job_id, folder)
    assert [p["attempt"] for p in progress(folder)] == [0]
    yield final_weights(folder)  # type: ignore[misc]


def _same(a: object, b: object) -> bool:
    assert isinstance(a, dict) and isinstance(b, dict)
    return a["step"] == b["step"] == STEPS and torch.equal(a["w"], b["w"])


def test_preempted_run_resumes_and_matches_bit_for_bit(
    sandbox: Sandbox, baseline: dict[str, object], tmp_path: Path
) -> None:
    slurm = CommandLineSlurm()
    job_id = submit(tmp_path, nodes="2")
    wait_for("step 12", lambda: step_reached(tmp_path) >= 12, timeout=120)
    victim = slurm.job(job_id).nodes[1]
    try:
        preempt(sandbox, PreemptPlan(victim, window=2, return_after=1), say=lambda _: None)
        wait_done(slurm, job_id, tmp_path)
    finally:
        restore_node(sandbox, victim) if slurm.nodes([victim])[0].down else None
    runs = progress(tmp_path)
    assert [r["attempt"] for r in runs] == [0, 1]
    resumed = runs[1]["resumed_step"]
    assert isinstance(resumed, int) and resumed >= 10 and resumed % 5 == 0
    assert runs[1]["resume_path"] == str(tmp_path / "ckpt" / f"step-{resumed:08d}")
    assert slurm.job(job_id).restarts == 1
    assert _same(final_weights(tmp_path), baseline)


def test_kill_during_a_checkpoint_write_resumes_from_the_previous_one(
    sandbox: Sandbox, baseline: dict[str, object], tmp_path: Path
) -> None:
    slurm = CommandLineSlurm()
    job_id = submit(tmp_path, nodes="2", extra=["--slow-checkpoint-at", "10"])
    marker = tmp_path / "ckpt" / "writing-checkpoint"
    wait_for("the slow checkpoint write", marker.exists, timeout=120)
    victim = slurm.job(job_id).nodes[0]  # the batch host, mid-write
    try:
        preempt(sandbox, PreemptPlan(victim, window=0, return_after=1), say=lambda _: None)
        wait_done(slurm, job_id, tmp_path)
    finally:
        restore_node(sandbox, victim) if slurm.nodes([victim])[0].down else None
    runs = progress(tmp_path)
    assert [(r["attempt"], r["resumed_step"]) for r in runs] == [(0, 0), (1, 5)]
    # The half-written step 10 was never published; it stays hidden, not deleted.
    assert list((tmp_path / "ckpt").glob(".incoming-step-00000010-*"))
    assert _same(final_weights(tmp_path), baseline)


def test_restart_on_fewer_nodes_sees_the_world_size_change(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    slurm = CommandLineSlurm()
    # Start on both preemptible nodes: wait until the last test's jobs have left them.
    wait_for(
        "both preemptible nodes idle",
        lambda: all(n.state == "IDLE" and not n.flags for n in slurm.nodes(PREEMPTIBLE)),
    )
    job_id = submit(tmp_path, nodes="1-2")
    job = wait_for("2 nodes", lambda: len((j := slurm.job(job_id)).nodes) == 2 and j, timeout=60)
    wait_for("step 12", lambda: step_reached(tmp_path) >= 12, timeout=120)
    victim = job.nodes[1]
    try:
        preempt(sandbox, PreemptPlan(victim, window=1), say=lambda _: None)
        wait_done(slurm, job_id, tmp_path)
    finally:
        restore_node(sandbox, victim)
    runs = progress(tmp_path)
    assert [(r["attempt"], r["world"], r["previous_world"]) for r in runs] == [
        (0, 2, None),
        (1, 1, 2),
    ]
    assert runs[1]["slurmpre_world"] == 1
    final = final_weights(tmp_path)
    assert isinstance(final, dict) and final["step"] == STEPS
    subprocess.run(["scontrol", "show", "job", job_id], check=True, capture_output=True)
