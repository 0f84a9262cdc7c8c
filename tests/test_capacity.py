"""`slurmpre nodes`: capacity by class, draining nodes and the user's jobs on them,
from scontrol output captured on the sandbox."""

from __future__ import annotations

import re
from pathlib import Path

from slurmpre.login.capacity import capacity, lines
from slurmpre.slurm.parse import gres_gpus, parse_jobs, parse_nodes


def test_one_preemptible_node_draining_under_a_running_job(captured: Path) -> None:
    nodes = parse_nodes((captured / "nodes-one-draining.txt").read_text())
    jobs = parse_jobs((captured / "job-running-elastic.txt").read_text())
    cap = capacity(nodes, jobs, "root")
    p, s = cap.preemptible, cap.standard
    assert (p.nodes, p.up, p.allocated, p.idle, p.draining, p.down) == (2, 1, 1, 0, 1, 0)
    assert (s.nodes, s.up, s.allocated, s.idle, s.draining, s.down) == (1, 1, 0, 1, 0, 0)
    assert (p.gpus, p.gpus_up, s.gpus, s.gpus_idle) == (4, 2, 2, 2)
    (d,) = cap.draining
    assert d.node == "gpu-preemptible-dp-1" and d.preemptible
    assert d.reason == "preempted [by test]" and d.since is not None
    running = [j.job_id for j in jobs if j.state == "RUNNING"]
    assert d.jobs == tuple(running) and cap.at_risk == running
    assert capacity(nodes, jobs, "someone-else").at_risk == []
    text = lines(cap, now=d.since + 90)
    assert text[1].split() == ["preemptible", "2", "1", "1", "0", "1", "0", "4", "2"]
    drained = next(n for n in nodes if n.name == d.node)
    assert drained.state in ("ALLOCATED", "MIXED")  # 22.05 gave the job both CPUs, 24.11+ one
    assert text[3].startswith(f"draining gpu-preemptible-dp-1 ({drained.state}+DRAIN) for 90 s: ")
    assert text[-1] == f"about to be preempted: job {', '.join(running)}"


def test_a_removed_node_is_down_not_draining(captured: Path) -> None:
    cap = capacity(parse_nodes((captured / "node-down-drain.txt").read_text()), [], "root")
    assert (cap.preemptible.down, cap.preemptible.draining, cap.preemptible.up) == (1, 0, 0)
    assert cap.draining == []


def test_gpu_counts_from_gres_and_alloc_tres(captured: Path) -> None:
    assert gres_gpus("gpu:8") == 8
    assert gres_gpus("gpu:h100:8(S:0-1)") == 8
    assert gres_gpus("gpu:a100:2,gpu:h100:4(S:1)") == 6
    assert gres_gpus("(null)") == 0 and gres_gpus(None) == 0
    line = (captured / "nodes-one-draining.txt").read_text().splitlines()[1]
    busy = re.sub(r"AllocTRES=(cpu=\d+)", r"AllocTRES=\1,gres/gpu=1,gres/gpu:h100=1", line)
    assert busy != line
    (idle,) = parse_nodes(line)
    (node,) = parse_nodes(busy)
    assert (node.gpus, node.gpus_alloc, node.cpus) == (2, 1, 2)
    assert node.cpus_alloc == idle.cpus_alloc >= 1
