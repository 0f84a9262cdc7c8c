"""`slurmpre nodes`: capacity by class, draining nodes and the user's jobs on them,
from scontrol output captured on the sandbox."""

from __future__ import annotations

from slurmpre.capacity import capacity, lines
from slurmpre.slurm.parse import gres_gpus, parse_jobs, parse_nodes

from tests.conftest import DATA

D = DATA / "slurm-22.05"


def test_one_preemptible_node_draining_under_a_running_job() -> None:
    nodes = parse_nodes((D / "nodes-one-draining.txt").read_text())
    jobs = parse_jobs((D / "job-running-elastic.txt").read_text())
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
    assert text[3].startswith("draining gpu-preemptible-dp-1 (ALLOCATED+DRAIN) for 90 s: ")
    assert text[-1] == f"about to be preempted: job {', '.join(running)}"


def test_a_removed_node_is_down_not_draining() -> None:
    cap = capacity(parse_nodes((D / "node-down-drain.txt").read_text()), [], "root")
    assert (cap.preemptible.down, cap.preemptible.draining, cap.preemptible.up) == (1, 0, 0)
    assert cap.draining == []


def test_gpu_counts_from_gres_and_alloc_tres() -> None:
    assert gres_gpus("gpu:8") == 8
    assert gres_gpus("gpu:h100:8(S:0-1)") == 8
    assert gres_gpus("gpu:a100:2,gpu:h100:4(S:1)") == 6
    assert gres_gpus("(null)") == 0 and gres_gpus(None) == 0
    line = (D / "nodes-one-draining.txt").read_text().splitlines()[1]
    busy = line.replace("AllocTRES=cpu=2", "AllocTRES=cpu=2,gres/gpu=1,gres/gpu:h100=1")
    (node,) = parse_nodes(busy)
    assert (node.gpus, node.gpus_alloc, node.cpus, node.cpus_alloc) == (2, 1, 2, 2)
