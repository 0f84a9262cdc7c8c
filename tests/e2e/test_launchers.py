"""The launchers on the sandbox's nodes: what each rank of a 2-node job sees.

`launcher = "accelerate"`: one `accelerate launch` per node, given the allocation's
machines, node rank and node 0's rendezvous; every process must count itself in
one world, on the node Slurm placed it, and talk to the others (an all-reduce).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from slurmpre.slurm.client import CommandLineSlurm

from tests.conftest import slurmpre_cli, wait_preemptible_idle
from tests.e2e.helpers import jsonl, ledger, wait_done

pytest.importorskip("accelerate", reason="the e2e extra (accelerate) is not installed")

pytestmark = [pytest.mark.sandbox, pytest.mark.e2e]

REPORT = """\
import json, os
from pathlib import Path
import torch
import torch.distributed as dist
from accelerate import Accelerator

accelerator = Accelerator()
total = torch.tensor([float(accelerator.process_index + 1)])
dist.all_reduce(total)  # every process of the world takes part, or this hangs
line = {
    "index": accelerator.process_index,
    "local": accelerator.local_process_index,
    "processes": accelerator.num_processes,
    "sum": total.item(),
    "node": os.environ["SLURMD_NODENAME"],
    "node_rank": int(os.environ["GROUP_RANK"]),
    "distributed": str(accelerator.distributed_type),
}
with open(Path(os.environ["SLURMPRE_CHECKPOINT_DIR"]) / "ranks.jsonl", "a") as out:
    out.write(json.dumps(line) + "\\n")
accelerator.wait_for_everyone()
"""


def test_accelerate_launcher_runs_one_world_over_the_allocations_nodes(tmp_path: Path) -> None:
    slurm = CommandLineSlurm()
    wait_preemptible_idle(slurm)
    (tmp_path / "report.py").write_text(REPORT)
    spec = tmp_path / "accelerate.toml"
    spec.write_text(
        "\n".join(
            [
                'name = "accelerate-ranks"',
                f"command = {json.dumps([sys.executable, str(tmp_path / 'report.py')])}",
                'launcher = "accelerate"',
                'nodes = "2"',
                f"checkpoint_dir = {json.dumps(str(tmp_path / 'ckpt'))}",
                "[env]",
                'GLOO_SOCKET_IFNAME = "lo"',
                f"HF_HOME = {json.dumps(str(tmp_path / 'hf'))}",  # no Accelerate config here
            ]
        )
        + "\n"
    )
    job_id = slurmpre_cli("submit", str(spec), check=True).stdout.strip()
    wait_done(slurm, job_id, tmp_path, timeout=240)
    nodes = slurm.job(job_id).nodes
    ranks = sorted(jsonl(tmp_path / "ckpt" / "ranks.jsonl"), key=lambda r: r["index"])
    assert [r["index"] for r in ranks] == [0, 1]
    assert all(r["processes"] == 2 and r["local"] == 0 for r in ranks)
    assert all(r["sum"] == 3.0 for r in ranks)  # 1 + 2: both processes in one world
    # Machine rank i runs on the job's i-th node, node 0 hosting the rendezvous.
    assert [(r["node_rank"], r["node"]) for r in ranks] == list(enumerate(nodes))
    assert {r["distributed"] for r in ranks} == {"DistributedType.MULTI_CPU"}
    start = next(r for r in ledger(tmp_path) if r["event"] == "start")
    assert (start["num_nodes"], start["world_size"]) == (2, 2)
