"""CPUs and GPUs reach the training processes under task/affinity (and task/cgroup).

A spec asks for all of a sandbox node's CPUs and both its stand-in GPUs; the
training process and a process it starts read their own CPU affinity and GPU
environment on every node. Before srun was given ``--cpus-per-task`` again,
Slurm releases that do not pass sbatch's value on to srun bound the wrapper
and its workers to one CPU.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.slurm.client import CommandLineSlurm

from tests.conftest import slurmpre_cli, wait_for, wait_preemptible_idle

pytestmark = pytest.mark.sandbox

PROBE = r"""
import json, os, subprocess, sys
def me():
    return {
        "cpus": sorted(os.sched_getaffinity(0)),
        "gpus": os.environ.get("SLURM_GPUS_ON_NODE"),
        "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
child = subprocess.run(
    [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
    capture_output=True, text=True, check=True,
).stdout
out = {**me(), "worker_cpus": json.loads(child)}
path = os.path.join(os.environ["SLURMPRE_CHECKPOINT_DIR"], f"probe-{os.environ['SLURM_NODEID']}")
open(path, "w").write(json.dumps(out))
"""


def test_training_processes_see_every_cpu_and_gpu_the_spec_asked_for(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    cpus = sandbox.config().topology.cpus
    assert cpus >= 2, "the sandbox nodes need 2 CPUs to tell binding apart"
    slurm = CommandLineSlurm()
    wait_preemptible_idle(slurm)
    ckpt = tmp_path / "ckpt"
    spec = tmp_path / "probe.toml"
    spec.write_text(
        "\n".join(
            [
                'name = "probe"',
                f"command = {json.dumps([sys.executable, '-c', PROBE])}",
                'nodes = "2"',
                'launcher = "plain"',
                f"cpus_per_task = {cpus}",
                "gpus_per_node = 2",
                f"checkpoint_dir = {json.dumps(str(ckpt))}",
            ]
        )
        + "\n"
    )
    job_id = slurmpre_cli("submit", str(spec), check=True).stdout.strip()
    wait_for(f"job {job_id} to finish", lambda: slurm.job(job_id).finished, timeout=120)
    job = slurm.job(job_id)
    logs = "\n".join(p.read_text() for p in (ckpt / "logs").glob("*.out"))
    assert job.state == "COMPLETED", logs
    for node in (0, 1):
        seen = json.loads((ckpt / f"probe-{node}").read_text())
        assert len(seen["cpus"]) == cpus, (node, seen)
        assert len(seen["worker_cpus"]) == cpus, (node, seen)
        assert seen["gpus"] == "2", (node, seen)
        assert len(seen["visible"].split(",")) == 2, (node, seen)
    print(f"{cpus} CPUs per task on both nodes, tracking {sandbox.current().tracking}")
    assert os.sched_getaffinity(0)  # the test itself is not bound
