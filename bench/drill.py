"""slurmpre against the seeds' recipe, under one schedule of preemptions (the drill's --baseline).

Runs `slurmpre drill --baseline` in this process: the drill's training job
through slurmpre (watcher, just-in-time checkpoint, immediate requeue) and the
same job as the provider's docs write it (--requeue, periodic checkpoints,
resume from the latest after a restart), each preempted at the same seeded
moments on the sandbox's two preemptible nodes, with an uninterrupted run as
the reference. Prints the drill's side-by-side table and the ratios, with the
sandbox's timings.

Usage: python bench/drill.py [--preemptions 3] [--window 20] [--seed S] [--stock-timings]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from slurmpre.drill import report
from slurmpre.drill.options import DrillOptions
from slurmpre.drill.run import render, run_drill
from slurmpre.sandbox.cluster import Sandbox


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--preemptions", type=int, default=3)
    parser.add_argument("--window", type=float, default=15.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--stock-timings", action="store_true")
    parser.add_argument("--workdir", type=Path, default=Path("/var/lib/slurmpre/bench-drill"))
    args = parser.parse_args()
    opts = DrillOptions(
        preemptions=args.preemptions,
        window=args.window,
        seed=args.seed,
        baseline=True,
        stock_timings=args.stock_timings,
        steps=args.steps,
        workdir=args.workdir,
    )
    result = run_drill(Sandbox(), opts, say=print)
    for line in render(result):
        print(line)
    ref = result.runs["reference"]
    seeds = report.summarize(result.runs["seeds"], ref)
    ours = report.summarize(result.runs["slurmpre"], ref)
    print(f"\nratios, seeds' recipe / slurmpre (sandbox timings: {result.timings}):")
    for label, a, b in (
        ("steps lost", seeds.steps_lost, ours.steps_lost),
        (
            "drain -> first new step",
            seeds.mean_drain_to_first_step_s,
            ours.mean_drain_to_first_step_s,
        ),
        ("wall time", seeds.wall_s, ours.wall_s),
    ):
        if a is None or b is None:
            print(f"  {label}: -")
        elif b == 0:
            print(f"  {label}: {a:g} against 0")
        else:
            print(f"  {label}: {a / b:.2f}")
    return 1 if result.failures() else 0


if __name__ == "__main__":
    raise SystemExit(main())
