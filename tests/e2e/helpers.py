"""Shared by the end-to-end tests: submit the tiny training job, wait, read what it reported."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.sandbox.preempt import Event, InBackground, PreemptPlan, restore_all
from slurmpre.slurm.client import CommandLineSlurm

from tests.conftest import slurmpre_cli, wait_for

TRAIN = Path(__file__).parent / "train_tiny.py"
STEPS = 40


def restart_line(lines: Sequence[str]) -> list[str]:
    """These tests exercise Slurm's requeue path (the fallback, and `restart = "requeue"`)
    unless a test says otherwise; the successor, the default, has test_successor.py, the
    drill and the versions' contract tests."""
    return [] if any(line.startswith("restart") for line in lines) else ['restart = "requeue"']


def submit(
    folder: Path,
    *,
    nodes: str,
    extra: Sequence[str] = (),
    spec_lines: Sequence[str] = (),
    steps: int = STEPS,
) -> str:
    spec = folder / "tiny.toml"
    command = [sys.executable, str(TRAIN), "--steps", str(steps), "--every", "5", *extra]
    spec.write_text(
        "\n".join(
            [
                'name = "tiny"',
                f"command = {json.dumps(command)}",
                f'nodes = "{nodes}"',
                f"checkpoint_dir = {json.dumps(str(folder / 'ckpt'))}",
                *spec_lines,
                *restart_line(spec_lines),
                "[env]",
                'GLOO_SOCKET_IFNAME = "lo"',
            ]
        )
        + "\n"
    )
    return slurmpre_cli("submit", str(spec), check=True).stdout.strip()


def write_spec(
    folder: Path,
    name: str,
    command: list[str],
    lines: Sequence[str] = (),
    env: Sequence[str] = (),
    nodes: str = "2",
) -> Path:
    """A spec for ``command`` on ``nodes`` nodes, checkpoints in ``folder/ckpt``."""
    spec = folder / f"{name}.toml"
    spec.write_text(
        "\n".join(
            [
                f'name = "{name}"',
                f"command = {json.dumps(command)}",
                f'nodes = "{nodes}"',
                f"checkpoint_dir = {json.dumps(str(folder / 'ckpt'))}",
                *lines,
                *restart_line(lines),
                "[env]",
                'GLOO_SOCKET_IFNAME = "lo"',
                *env,
            ]
        )
        + "\n"
    )
    return spec


def logs(folder: Path) -> str:
    return "\n".join(p.read_text() for p in sorted((folder / "ckpt" / "logs").glob("*.out")))


def wait_done(slurm: CommandLineSlurm, job_id: str, folder: Path, timeout: float = 240) -> None:
    wait_for(f"job {job_id} to finish", lambda: slurm.job(job_id).finished, timeout=timeout)
    job = slurm.job(job_id)
    if job.state != "COMPLETED":
        pytest.fail(f"job {job_id} ended {job.state}:\n{logs(folder)[-6000:]}")


def jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def progress(folder: Path) -> list[dict[str, Any]]:
    return jsonl(folder / "ckpt" / "progress.jsonl")


def notices(folder: Path) -> list[dict[str, Any]]:
    return jsonl(folder / "ckpt" / "notices.jsonl")


def ledger(folder: Path) -> list[dict[str, Any]]:
    return jsonl(folder / "ckpt" / ".slurmpre" / "attempts.jsonl")


def successor_of(folder: Path) -> str | None:
    """The job the run in ``folder`` handed over to, once the ledger records it."""
    found = [r["successor"] for r in ledger(folder) if r["event"] == "successor"]
    return str(found[0]) if found else None


def step_reached(folder: Path) -> int:
    try:
        return int((folder / "ckpt" / "progress-step").read_text() or 0)
    except (OSError, ValueError):
        return 0


def final_weights(folder: Path) -> Any:
    import torch

    return torch.load(folder / "ckpt" / "final.pt")


def same_weights(a: Any, b: Any, steps: int = STEPS) -> bool:
    import torch

    return bool(a["step"] == b["step"] == steps and torch.equal(a["w"], b["w"]))


Preemption = InBackground  # `sandbox preempt` in the background, keeping its timeline


def preempt_until_done(
    sandbox: Sandbox,
    slurm: CommandLineSlurm,
    job_id: str,
    folder: Path,
    *plans: PreemptPlan,
    stagger: float = 0.0,
    until_completed: bool = True,
) -> list[list[Event]]:
    """Preempt (in the background, `stagger` s apart) and wait for the job; always restore."""
    running = []
    try:
        for i, plan in enumerate(plans):
            if i:
                time.sleep(stagger)
            running.append(Preemption(sandbox, plan))
            running[-1].start()
        if until_completed:
            wait_done(slurm, job_id, folder, timeout=300)
        else:
            wait_for("the job to end", lambda: slurm.job(job_id).finished, timeout=120)
        return [p.finish() for p in running]
    finally:
        restore_all(sandbox)
