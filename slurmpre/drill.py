"""The preemption drill: rehearse a preemption end to end on the local sandbox.

Brings the sandbox up, submits a small job to the preemptible nodes with
``--requeue`` and an elastic node range, preempts one of its nodes the way the
provider does, and reports what happened, attempt by attempt.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from slurmpre.errors import SlurmpreError, UsageError
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.sandbox.preempt import Event, PreemptPlan, preempt, restore_node
from slurmpre.slurm.parse import JobInfo

T = TypeVar("T")

JOB_SCRIPT = """#!/bin/bash
#SBATCH --job-name=slurmpre-drill
#SBATCH --constraint=preemptible
#SBATCH --requeue
#SBATCH --nodes=1-2
#SBATCH --ntasks-per-node=1
#SBATCH --open-mode=append
#SBATCH --output={log}
echo "attempt restart=${{SLURM_RESTART_COUNT:-0}} on $SLURM_JOB_NUM_NODES node(s):" \
     "$SLURM_JOB_NODELIST at $(date +%T)"
srun bash -c 'for i in $(seq 1 600); do echo "  $SLURMD_NODENAME tick $i"; sleep 1; done'
"""


@dataclass(frozen=True)
class DrillReport:
    job_id: str
    victim: str
    events: tuple[Event, ...]
    restarted_on: tuple[str, ...]
    seconds_to_restart: float
    log: Path


def run_drill(
    sandbox: Sandbox,
    *,
    window: float = 10.0,
    workdir: Path,
    timeout: float = 180.0,
    say: Callable[[str], None] = print,
) -> DrillReport:
    if window < 0:
        raise UsageError(f"--window must be 0 seconds or more, got {window:g}")
    sandbox.up(say=say)
    client = sandbox.client
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "drill-%j.out"
    job_id = client.submit(JOB_SCRIPT.format(log=shlex.quote(str(log))))
    log = workdir / f"drill-{job_id}.out"
    victim: str | None = None
    say(f"submitted job {job_id} (--constraint=preemptible --requeue --nodes=1-2); log {log}")
    try:
        job: JobInfo = _wait(
            lambda: (j := client.job(job_id)).state == "RUNNING" and j, timeout, "start"
        )
        say(f"job {job_id} runs on {', '.join(job.nodes)}")
        time.sleep(2)
        victim = next((n for n in job.nodes if n != job.batch_host), job.nodes[0])
        events = preempt(sandbox, PreemptPlan(victim, window=window, return_after=None), say=say)
        removed_at = time.monotonic()
        job = _wait(
            lambda: (j := client.job(job_id)).state == "RUNNING" and j.restarts >= 1 and j,
            timeout,
            "restart",
        )
        restart = time.monotonic() - removed_at
        say(
            f"job {job_id} restarted (SLURM_RESTART_COUNT={job.restarts}) on "
            f"{', '.join(job.nodes)}, {restart:.1f} s after the node was removed"
        )
        _wait(lambda: log.exists() and log.read_text().count("attempt restart=") >= 2, 60, "log")
        time.sleep(2)
    finally:
        client.cancel(job_id)
        if victim is not None and client.nodes([victim])[0].down:
            restore_node(sandbox, victim)
    say(f"--- {log} (every attempt, appended) ---")
    say(log.read_text().rstrip())
    return DrillReport(job_id, victim, tuple(events), job.nodes, restart, log)


def _wait(probe: Callable[[], T | bool | None], timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = probe()
        if got is not None and got is not False:
            return got  # type: ignore[return-value]
        time.sleep(0.5)
    raise SlurmpreError(f"drill: the job did not {what} within {timeout:g} s")
