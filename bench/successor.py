"""A successor against a requeue, for a one-node job: drain → training again.

The drill's training job (torchrun over gloo, ``nodes = "1"``, a script that
checkpoints on the notice), drained while the other preemptible node is free,
once with ``restart = "requeue"`` (slurmpre requeues at once after the notice
checkpoint; Slurm starts the job again after ``cred_expire + 1``) and once with
``restart = "successor"`` (a new job with the same script takes over). Printed
for each, measured in this one run: the notice checkpoint's write time, drain
seen → checkpoint saved, drain seen → first step trained again, and the ratio.
Target (#21): the successor trains again within checkpoint time + 10 s of the
drain being seen. Run it on both timings; stock is what users live with.

Usage: python bench/successor.py [--stock-timings] [--window 120]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import tomllib
from slurmpre.drill.jobs import drill_spec
from slurmpre.drill.options import DrillOptions
from slurmpre.drill.run import bring_up, wait_whole
from slurmpre.drill.train import LOG
from slurmpre.job.ledger import Ledger
from slurmpre.job.records import Checkpoint, Notice
from slurmpre.login.status import chain
from slurmpre.login.submit import submit
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.sandbox.preempt import InBackground, PreemptPlan
from slurmpre.slurm.parse import requeue_floor

from inplace import ROOT, jsonl, wait  # bench/: the same helpers as the in-place bench


def last_job(folder: Path, first: str) -> str:
    """The run's last job: ``first``, or the successor that took over from it."""
    return chain(Ledger(folder).records(), first)[-1]


def one(box: Sandbox, work: Path, restart: str, window: float) -> dict[str, Any]:
    raw = tomllib.loads((ROOT / "examples" / "drill.toml").read_text())
    opts = DrillOptions(window=window, steps=600, step_seconds=0.1, every=1000)
    folder = work / restart
    spec = drill_spec(raw, opts, folder, nodes="1", restart=restart, name=restart)
    wait_whole(box)
    first = submit(spec, box.client).job_id
    log = folder / LOG
    job = wait("the job to run", lambda: (j := box.client.job(first)).nodes and j, 120)
    wait("step 30", lambda: sum(e["event"] == "step" for e in jsonl(log)) >= 30, 180)
    preempt = InBackground(box, PreemptPlan(job.nodes[0], window=window, return_after=5))
    preempt.start()
    wait("the run to end", lambda: box.client.job(last_job(folder, first)).finished, 600)
    preempt.finish(timeout=window + 120)
    final = box.client.job(last_job(folder, first))
    if final.state != "COMPLETED":
        raise SystemExit(f"bench: the {restart} run ended {final.state}; see {folder / 'logs'}")
    typed = Ledger(folder).records()
    notice = next(r for r in typed if isinstance(r, Notice))
    events = jsonl(log)
    saved = next(e for e in events if e["event"] == "save-end" and e["why"] == "notice")
    began = [e for e in events if e["event"] == "begin"]
    first_after = next(e for e in events if e["event"] == "step" and e["t"] > began[-1]["t"])
    checkpoint = next(r.seconds for r in typed if isinstance(r, Checkpoint) and r.after_notice)
    return {
        "jobs": [first, last_job(folder, first)],
        "restarts": box.client.job(first).restarts,
        "checkpoint_s": checkpoint or 0.0,
        "seen_to_saved_s": saved["t"] - notice.seen_at,
        "seen_to_training_s": first_after["t"] - notice.seen_at,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stock-timings", action="store_true")
    parser.add_argument("--window", type=float, default=120.0)
    args = parser.parse_args()
    box = Sandbox()
    timings = bring_up(box, DrillOptions(stock_timings=args.stock_timings), print)
    box.use()
    floor = requeue_floor(box.client.config())
    work = Path(tempfile.mkdtemp(prefix="bench-successor-", dir="/var/lib/slurmpre"))
    work.chmod(0o755)
    runs = {restart: one(box, work, restart, args.window) for restart in ("successor", "requeue")}
    print(f"\nsandbox timings: {timings}; requeue floor (cred_expire + 1): {floor} s")
    print(f"  {'':<10} {'jobs':>12} {'restarts':>8} {'ckpt s':>7} {'seen→saved s':>13} "
          f"{'seen→training s':>16}")  # fmt: skip
    for name, run in runs.items():
        print(
            f"  {name:<10} {'→'.join(run['jobs']):>12} {run['restarts']:>8} "
            f"{run['checkpoint_s']:>7.2f} {run['seen_to_saved_s']:>13.1f} "
            f"{run['seen_to_training_s']:>16.1f}"
        )
    ours, theirs = runs["successor"], runs["requeue"]
    ratio = theirs["seen_to_training_s"] / ours["seen_to_training_s"]
    target = ours["checkpoint_s"] + 10
    print(f"\nratio, requeue / successor (drain seen → training again): {ratio:.1f}x")
    verdict = "met" if ours["seen_to_training_s"] <= target else "MISSED"
    print(
        f"target, successor ≤ checkpoint + 10 s = {target:.1f} s: {verdict} "
        f"({ours['seen_to_training_s']:.1f} s)"
    )
    handed_over = ours["restarts"] == 0 and ours["jobs"][0] != ours["jobs"][1]
    return 0 if handed_over and theirs["restarts"] == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
