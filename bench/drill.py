"""slurmpre against the seeds' recipe, under one schedule of preemptions (the drill's --baseline).

Runs `slurmpre drill --baseline` in this process: the drill's training job
through slurmpre (watcher, just-in-time checkpoint, immediate requeue) and the
same job as the provider's docs write it (--requeue, periodic checkpoints,
resume from the latest after a restart), each preempted at the same seeded
moments on the sandbox's two preemptible nodes, with an uninterrupted run as
the reference. Prints the drill's side-by-side table and the ratios, with the
sandbox's timings.

Usage: python bench/drill.py [--preemptions 3] [--window 60] [--checkpoint-interval 500]
       [--seed S] [--tuned-timings]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from slurmpre.drill.options import DrillOptions
from slurmpre.drill.run import run_drill
from slurmpre.drill.table import render
from slurmpre.lines import sent_to
from slurmpre.sandbox.cluster import Sandbox


def main() -> int:
    defaults = DrillOptions()
    parser = argparse.ArgumentParser()
    parser.add_argument("--preemptions", type=int, default=defaults.preemptions)
    parser.add_argument("--window", type=float, default=defaults.window)
    parser.add_argument("--checkpoint-interval", type=int, default=defaults.every)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--tuned-timings", action="store_true")
    parser.add_argument(
        "--big-state-mb", type=int, default=defaults.big_state_mb, help="0: no big-state scene"
    )
    parser.add_argument("--workdir", type=Path, default=Path("/var/lib/slurmpre/bench-drill"))
    parser.add_argument(
        "--quick", action="store_true", help="CI's smoke test: one preemption, tuned timings"
    )
    args = parser.parse_args()
    if args.quick:
        # (the big state has its own quick lane: big_state.py --quick)
        args.preemptions, args.tuned_timings, args.big_state_mb = 1, True, 0
    opts = DrillOptions(
        preemptions=args.preemptions,
        window=args.window,
        every=args.checkpoint_interval,
        seed=args.seed,
        baseline=True,
        stock_timings=not args.tuned_timings,
        steps=args.steps,
        big_state_mb=args.big_state_mb,
        workdir=args.workdir,
    )
    with sent_to(print, "slurmpre.drill", "slurmpre.sandbox"):
        result = run_drill(Sandbox.here(), opts)
    # The table's last column is each figure's ratio, as times better for slurmpre.
    for line in render(result):
        print(line)
    return 1 if result.failures() else 0


if __name__ == "__main__":
    raise SystemExit(main())
