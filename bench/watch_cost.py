"""What the watcher costs: Slurm queries per minute per job, and training step throughput.

1. Queries: a one-node job with the watcher idles for --minutes; slurmctld's own
   RPC counters (sdiag) are read before and after, so every query the job
   makes is counted, whoever makes it. Reference in the same run: the same job
   with the watcher off.
2. Throughput: the tiny training job on two nodes with steps of --work-ms of
   busy compute (a stand-in for a real step), with the watcher on and the
   script asking slurmpre.preemption_requested() every step, against the
   watcher off and no per-step call; runs interleaved, medians compared.
   Target: at most 0.5 % slower.

Usage: python bench/watch_cost.py [--minutes 1] [--pairs 3] [--steps 150] [--work-ms 100]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from slurmpre.drill.train import LOG
from slurmpre.login.render import render
from slurmpre.login.spec import validate
from slurmpre.sandbox.cluster import Sandbox


def rpc_counts() -> dict[str, int]:
    out = subprocess.run(["sdiag"], capture_output=True, text=True, check=True).stdout
    return {
        m.group(1): int(m.group(2))
        for m in re.finditer(r"^\s+(REQUEST_\w+)\s+\(\s*\d+\)\s+count:(\d+)", out, re.M)
    }


def wait_finished(box: Sandbox, job_id: str, timeout: float = 600) -> str:
    deadline = time.time() + timeout
    while time.time() < deadline:
        job = box.client.job(job_id)
        if job.finished:
            return job.state
        time.sleep(1)
    raise SystemExit(f"bench: job {job_id} did not finish")


def queries_per_minute(
    box: Sandbox, work: Path, minutes: float, watch: bool
) -> tuple[float, float]:
    folder = work / f"idle-{'watch' if watch else 'nowatch'}"
    seconds = int(minutes * 60)
    spec = validate(
        {
            "name": "idle",
            "command": ["sleep", str(seconds + 5)],
            "launcher": "plain",
            "checkpoint_dir": str(folder),
            "watch": watch,
        }
    )
    folder.mkdir(parents=True)
    (folder / "logs").mkdir()
    job_id = box.client.submit(render(spec))
    while box.client.job(job_id).state != "RUNNING":
        time.sleep(0.2)
    time.sleep(3)  # let the wrapper start
    before = rpc_counts()
    time.sleep(seconds)
    after = rpc_counts()
    box.client.cancel(job_id)
    wait_finished(box, job_id)
    node_info = after.get("REQUEST_NODE_INFO", 0) - before.get("REQUEST_NODE_INFO", 0)
    total = sum(after.values()) - sum(before.values())
    return node_info / minutes, total / minutes


def throughput(
    box: Sandbox, work: Path, name: str, steps: int, work_ms: float, watch: bool
) -> float:
    folder = work / name
    command = [
        sys.executable,
        "-m",
        "slurmpre.drill.train",
        "--mode",
        "slurmpre" if watch else "seeds",
        "--steps",
        str(steps),
        "--every",
        str(steps + 1),
        "--step-seconds",
        "0",
        "--work-ms",
        str(work_ms),
    ]
    spec = validate(
        {
            "name": name,
            "command": command,
            "nodes": 2,
            "checkpoint_dir": str(folder),
            "watch": watch,
            "env": {"GLOO_SOCKET_IFNAME": "lo"},
        }
    )
    (folder / "logs").mkdir(parents=True)
    job_id = box.client.submit(render(spec))
    state = wait_finished(box, job_id)
    if state != "COMPLETED":
        raise SystemExit(f"bench: job {job_id} ended {state}; logs in {folder / 'logs'}")
    log = [json.loads(line) for line in (folder / LOG).read_text().splitlines()]
    started = next(e["t"] for e in log if e["event"] == "begin")
    done = next(e["t"] for e in log if e["event"] == "done")
    return steps / (done - started)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=1.0)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--work-ms", type=float, default=100.0)
    parser.add_argument("--quick", action="store_true", help="CI's smoke test: a short run")
    args = parser.parse_args()
    if args.quick:
        args.minutes, args.pairs, args.steps, args.work_ms = 0.25, 1, 20, 10.0
    box = Sandbox.here()
    if box.load() is None:  # any running shape will do
        box.up()
    box.use()  # its Slurm commands first on PATH (26.05's are not the host's)
    work = Path(tempfile.mkdtemp(prefix="slurmpre-watch-cost-"))

    with_watch = queries_per_minute(box, work, args.minutes, watch=True)
    without = queries_per_minute(box, work, args.minutes, watch=False)
    print(
        f"Slurm queries per minute for one job over {args.minutes:g} min (sdiag, default 5 s interval):"
    )
    print(f"  watcher on:  {with_watch[0]:5.1f} node queries, {with_watch[1]:5.1f} RPCs in all")
    print(f"  watcher off: {without[0]:5.1f} node queries, {without[1]:5.1f} RPCs in all")
    print(f"  the watcher's own: {with_watch[0] - without[0]:.1f} node queries per minute")

    on, off = [], []
    for i in range(args.pairs):
        off.append(throughput(box, work, f"off-{i}", args.steps, args.work_ms, watch=False))
        on.append(throughput(box, work, f"on-{i}", args.steps, args.work_ms, watch=True))
    m_on, m_off = statistics.median(on), statistics.median(off)
    slower = (1 - m_on / m_off) * 100
    print(
        f"step throughput, 2 nodes x 1 rank, {args.steps} steps of {args.work_ms:g} ms, {args.pairs} interleaved pairs:"
    )
    print(
        f"  watcher off, no per-step call: median {m_off:.3f} steps/s  ({', '.join(f'{x:.3f}' for x in off)})"
    )
    print(
        f"  watcher on + preemption_requested() each step: median {m_on:.3f} steps/s  ({', '.join(f'{x:.3f}' for x in on)})"
    )
    print(f"  ratio on / off: {m_on / m_off:.4f}  ({slower:+.2f} % slower; target <= 0.5 %)")
    print(f"folders kept in {work}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
