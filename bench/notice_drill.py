"""The seeds' recipe and slurmpre, preempted side by side on the sandbox.

Two copies of the same tiny training job (tests/e2e/train_tiny.py, real
torchrun over gloo) run at once, each on one preemptible node:
- seeds: the provider's documented recipe: periodic checkpoints, --requeue,
  SLURM_RESTART_COUNT and resume-from-latest, no watcher (its checkpoints still
  commit atomically, which favours it);
- slurmpre: the generated script with the watcher, and the script asking
  slurmpre.preemption_requested() every step.
Both nodes are drained at the same moment; each is removed WINDOW seconds
later (the provider's T+5:00, shortened). Spare preemptible nodes are free, so
each job can restart at once. Prints steps lost, drain -> restart, and total
wall time, as ratios, with the sandbox's timing settings.

Usage: python bench/notice_drill.py [--window 60] [--steps 200] [--every 20] [--stock-timings]
Restarts the sandbox with 5 nodes (4 preemptible) if it has another shape.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path

from slurmpre.errors import UsageError
from slurmpre.render import render
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.sandbox.config import STOCK, TUNED
from slurmpre.sandbox.preempt import PreemptPlan, restore_node
from slurmpre.spec import validate

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.e2e.helpers import Preemption  # after the repository root is on sys.path

TRAIN = Path(__file__).resolve().parent.parent / "tests" / "e2e" / "train_tiny.py"

SEEDS_SCRIPT = """#!/bin/bash
#SBATCH --job-name=seeds-recipe
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --constraint=preemptible
#SBATCH --requeue
#SBATCH --exclusive
#SBATCH --open-mode=append
#SBATCH --output={log}
# The provider's recipe. On the sandbox every node is 127.0.0.1, so the
# rendezvous endpoint is that address rather than the first hostname.
export SLURMPRE_CHECKPOINT_DIR={ckpt}
export GLOO_SOCKET_IFNAME=lo
if [ "${{SLURM_RESTART_COUNT:-0}}" -gt 0 ]; then
  echo "Requeued (restart $SLURM_RESTART_COUNT), resuming from the latest checkpoint"
fi
srun {python} -m torch.distributed.run \\
  --nnodes=$SLURM_JOB_NUM_NODES --nproc_per_node=1 --rdzv_id=$SLURM_JOB_ID \\
  --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:29500 \\
  {train} {args} --naive-resume
"""


def read_jsonl(path: Path) -> list[dict[str, object]]:
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--window", type=float, default=60.0)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--every", type=int, default=20)
    parser.add_argument("--step-seconds", type=float, default=0.5)
    parser.add_argument("--drain-after-step", type=int, default=30)
    parser.add_argument("--stock-timings", action="store_true", help="Slurm's default timings")
    args = parser.parse_args()

    box = Sandbox()
    try:
        box.up(5, 4, stock_timings=args.stock_timings)
    except UsageError:  # up with another shape or timings: restart it
        print(
            "restarting the sandbox with 5 nodes (4 preemptible) so both jobs can restart at once"
        )
        box.down()
        box.up(5, 4, stock_timings=args.stock_timings)
    state = box.load()
    assert state is not None
    timings = TUNED if state.timings == "tuned" else STOCK
    client = box.client

    work = Path(tempfile.mkdtemp(prefix="slurmpre-bench-"))
    train_args = [
        "--steps",
        str(args.steps),
        "--every",
        str(args.every),
        "--step-seconds",
        str(args.step_seconds),
    ]
    folders = {"seeds": work / "seeds", "slurmpre": work / "slurmpre"}
    for f in folders.values():
        (f / "logs").mkdir(parents=True)

    seeds_script = SEEDS_SCRIPT.format(
        log=shlex.quote(str(folders["seeds"] / "logs" / "job.out")),
        ckpt=shlex.quote(str(folders["seeds"])),
        python=shlex.quote(sys.executable),
        train=shlex.quote(str(TRAIN)),
        args=" ".join(train_args),
    )
    spec = validate(
        {
            "name": "slurmpre-bench",
            "command": [sys.executable, str(TRAIN), *train_args, "--honor-notice"],
            "nodes": 1,
            "checkpoint_dir": str(folders["slurmpre"]),
            "preempt_window": int(args.window),
            "safety_margin": min(30, int(args.window) // 2),
            "env": {"GLOO_SOCKET_IFNAME": "lo"},
            "extra_sbatch": ["--exclusive"],  # a whole node each, as GPU jobs have
        }
    )
    submitted = time.time()
    jobs = {"seeds": client.submit(seeds_script), "slurmpre": client.submit(render(spec))}

    def step(name: str, attempt: int = 0) -> int:
        p = folders[name] / f"progress-step.attempt-{attempt}"
        try:
            return int(p.read_text() or 0)
        except (OSError, ValueError):
            return 0

    deadline = time.time() + 300
    while min(step("seeds"), step("slurmpre")) < args.drain_after_step:
        if time.time() > deadline:
            raise SystemExit("bench: the jobs did not start training in time")
        time.sleep(0.2)
    nodes = {name: client.job(job).nodes[0] for name, job in jobs.items()}
    drains = {
        name: Preemption(box, PreemptPlan(node, window=args.window)) for name, node in nodes.items()
    }
    for p in drains.values():
        p.start()
    for p in drains.values():
        p.finish()
    deadline = time.time() + 900
    while not all(client.job(j).finished for j in jobs.values()):
        if time.time() > deadline:
            raise SystemExit("bench: the jobs did not finish in time")
        time.sleep(1)
    for node in nodes.values():
        restore_node(box, node)

    results = {}
    for name, folder in folders.items():
        runs = read_jsonl(folder / "progress.jsonl")
        drained_at = drains[name].events[0].at
        trained_before = step(name, 0)
        resumed = int(runs[1]["resumed_step"]) if len(runs) > 1 else trained_before  # type: ignore[arg-type]
        restart = float(runs[1]["started_at"]) - drained_at if len(runs) > 1 else float("nan")  # type: ignore[arg-type]
        done = float((folder / "done-at").read_text())
        results[name] = {
            "state": client.job(jobs[name]).state,
            "steps_lost": trained_before - resumed,
            "drain_to_restart": restart,
            "wall": done - submitted,
        }
    s, p = results["seeds"], results["slurmpre"]
    print(
        f"sandbox timings: {timings.name} (cred_expire={timings.cred_expire or 120}, "
        f"SlurmdTimeout={timings.slurmd_timeout}, KillWait={timings.kill_wait}); "
        f"window {args.window:g} s; {args.steps} steps of {args.step_seconds:g} s, "
        f"checkpoint every {args.every} steps; drained after step {args.drain_after_step}"
    )
    print(f"{'':24}{'seeds recipe':>14}{'slurmpre':>12}{'ratio':>10}")
    print(f"{'final state':24}{s['state']:>14}{p['state']:>12}")
    print(
        f"{'steps lost':24}{s['steps_lost']:>14}{p['steps_lost']:>12}"
        f"{'-' if not p['steps_lost'] else s['steps_lost'] / p['steps_lost']:>10}"
    )
    print(
        f"{'drain -> restart (s)':24}{s['drain_to_restart']:>14.1f}{p['drain_to_restart']:>12.1f}"
        f"{s['drain_to_restart'] / p['drain_to_restart']:>10.2f}"
    )
    print(
        f"{'total wall time (s)':24}{s['wall']:>14.1f}{p['wall']:>12.1f}{s['wall'] / p['wall']:>10.2f}"
    )
    if timings.cred_expire is not None:
        floor = 120 - timings.cred_expire
        print(
            f"stock Slurm (cred_expire=120) adds at least {floor} s to each requeue -> restart "
            "for both: run with --stock-timings to measure it"
        )
    else:
        print("stock timings: a requeued job cannot start before requeue + 121 s")
    print(f"folders kept in {work}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
