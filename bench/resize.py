"""Shrink only, grow back, and a hot spare, side by side on one preemption and return
schedule (#36).

The drill's training job (torchrun over gloo, a fixed global batch split over the ranks:
a step takes a node ``step_seconds``, N nodes N times less) trains on N preemptible nodes
of a sandbox of N + 1. At step ``--at`` one training node is preempted the provider's way
(drained, then removed once the job has left it) and comes back ``--back`` seconds
later. Three jobs, one after the other:

- shrink only: ``nodes = "N-1 - N"``, ``grow = false``; the (N+1)th node stays drained
  (no capacity): it shrinks in place and ends on N - 1 nodes;
- grow back: the same range with grow on: it shrinks, then grows back to N once the node
  has returned and stayed idle for ``grow_settle`` (10 s);
- spare: ``nodes = N``, ``spare_nodes = 1``, on all N + 1: the spare takes the lost
  node's place in the same allocation.

Printed for each: the worlds it trained on, wall time from submit to the end, the
node-hours its jobs held (spares included: they are paid for), useful steps per node-hour,
the cost at the preemptible price, the steps lost, and the training time the preemption
cost (the last step before it to the first step after, less one step's time) against
C + 5 s for the spare (C: its last checkpoint's write; with `spare_overlap`, the default,
the next step starts up beside the training, which stops only for that checkpoint).

Usage: python bench/resize.py [--nodes 4] [--steps 1200] [--at 200] [--back 30]
                              [--tuned-timings] [--slurm 22.05] [--quick]
(stock timings by default; --quick: 2 training nodes and fewer steps, the target
reported but not enforced: CI's smoke test).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import tomllib
from slurmpre.drill.jobs import drill_spec
from slurmpre.drill.options import DrillOptions
from slurmpre.drill.train import LOG
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import Checkpoint, InPlaceRequested, Start
from slurmpre.login.submit import submit
from slurmpre.placement.facts import node_seconds
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.sandbox.preempt import InBackground, PreemptPlan
from slurmpre.slurm.parse import format_version

from grow import PRICE, follow, shaped, steps
from inplace import jsonl, wait

ROOT = Path(__file__).resolve().parent.parent
STEP_SECONDS = 0.4  # one step on one node


def one(box: Sandbox, work: Path, scene: str, args: argparse.Namespace) -> dict[str, Any]:
    raw = tomllib.loads((ROOT / "examples" / "drill.toml").read_text())
    opts = DrillOptions(window=120, steps=args.steps, step_seconds=STEP_SECONDS, every=10_000)
    folder = work / scene.replace(" ", "-")
    n = args.nodes
    shape: dict[str, Any] = (
        {"nodes": str(n), "spare_nodes": 1}
        if scene == "spare"
        else {"nodes": f"{n - 1}-{n}", "grow": scene == "grow back"}
    )
    spec = drill_spec(
        raw, opts, folder, name=folder.name, restart="successor", in_place=True, **shape
    )
    _all_idle(box)
    nodes = sorted(x.name for x in box.client.nodes() if "preemptible" in x.features)
    spare = nodes[-1]
    if scene != "spare":  # no capacity beyond N: only the preempted node comes back
        box.client.update_node(spare, state="DRAIN", reason="capacity not yet back")
    preempt = None
    try:
        submitted = time.time()
        first = submit(spec, box.client).job_id
        log = folder / LOG
        wait(f"step {args.at}", lambda: steps(log) >= args.at, 600)
        start = next(r for r in Ledger(folder).records() if isinstance(r, Start))
        held = box.client.job(first)
        victim = next(x for x in start.nodes if x != held.batch_host)
        preempt = InBackground(
            box, PreemptPlan(victim, window=120, return_after=args.back, once_empty=True)
        )
        preempt.start()
        jobs, info = follow(box, folder, first)
        preempt.finish(timeout=400)
    finally:
        if box.client.nodes([spare])[0].draining:  # an idle node's RESUME is refused
            box.client.update_node(spare, state="RESUME")
    if info.state != "COMPLETED":
        raise SystemExit(f"bench: job {jobs[-1]} ended {info.state}; logs in {folder / 'logs'}")
    ended = time.time()
    records = Ledger(folder).records()
    events = jsonl(log)
    node_s = sum(node_seconds(records, ended).values())
    began = [e for e in events if e["event"] == "begin"]
    second = began[1]
    before = [e for e in events if e["event"] == "step" and e["t"] < second["t"]]
    after = next(e for e in events if e["event"] == "step" and e["t"] > second["t"])
    # The last checkpoint before the hand-over: the stop's (after the notice's, for a script
    # that trained on while the next step started: make before break).
    stop = max(
        (
            r
            for r in records
            if isinstance(r, Checkpoint) and r.after_notice and (r.time or 0) < second["t"]
        ),
        key=lambda r: r.step,
    )
    step_time = STEP_SECONDS / args.nodes
    return {
        "jobs": jobs,
        "worlds": [e["world"] for e in began],
        "wall_s": ended - submitted,
        "node_h": node_s / 3600,
        "steps_per_node_h": opts.training_steps() / (node_s / 3600),
        "cost": node_s / 3600 * PRICE,
        "steps_lost": stop.step - second["resumed_step"],
        "lost_s": after["t"] - before[-1]["t"] - step_time,
        "checkpoint_s": stop.seconds or 0.0,
        "early": any(isinstance(r, InPlaceRequested) and r.early for r in records),
    }


def _all_idle(box: Sandbox) -> None:
    def idle() -> bool:
        return all(x.state == "IDLE" and not x.draining for x in box.client.nodes())

    wait("every node idle", idle, 300)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--steps", type=int, default=1200)
    parser.add_argument("--at", type=int, default=200)
    parser.add_argument("--back", type=float, default=30.0)
    parser.add_argument("--tuned-timings", action="store_true")
    parser.add_argument("--slurm", default=None, help="the release (default: 26.05)")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.nodes, args.steps, args.at, args.back = 2, 400, 60, 15.0
    if args.nodes < 2:
        raise SystemExit("bench: --nodes must be 2 or more (one shrinks to one fewer)")
    box = Sandbox.here()
    total = args.nodes + 1
    current = box.load()
    if args.quick and current is not None:
        stock = current.timings == "stock"
    else:
        stock = not args.tuned_timings
    timings = shaped(box, total, total, stock, args.slurm)
    box.use()
    version = format_version(box.client.version())
    work = Path(tempfile.mkdtemp(prefix="bench-resize-", dir="/var/lib/slurmpre"))
    work.chmod(0o755)
    runs = {name: one(box, work, name, args) for name in ("shrink only", "grow back", "spare")}
    n = args.nodes
    print(
        f"\nSlurm {version}, {timings} timings, {total} preemptible nodes; {args.steps} steps "
        f"of a fixed global batch ({STEP_SECONDS:g} s per step on one node); a training "
        f"node preempted at step {args.at}, back {args.back:g} s after its removal; price "
        f"{PRICE:g} per preemptible node-hour"
    )
    print(
        f"  {'':<12} {'worlds':>9} {'wall s':>7} {'node-h':>7} {'steps/node-h':>13} "
        f"{'cost':>7} {'lost steps':>10} {'lost s':>7}"
    )
    for name, run in runs.items():
        print(
            f"  {name:<12} {'→'.join(map(str, run['worlds'])):>9} {run['wall_s']:>7.0f} "
            f"{run['node_h']:>7.4f} {run['steps_per_node_h']:>13.0f} {run['cost']:>7.4f} "
            f"{run['steps_lost']:>10} {run['lost_s']:>7.1f}"
        )
    shrink, grow, spare = runs["shrink only"], runs["grow back"], runs["spare"]
    print(
        f"\nwall, shrink only / spare: {shrink['wall_s'] / spare['wall_s']:.2f}x; "
        f"grow back / spare: {grow['wall_s'] / spare['wall_s']:.2f}x; cost, spare / shrink "
        f"only: {spare['cost'] / shrink['cost']:.2f}x, spare / grow back: "
        f"{spare['cost'] / grow['cost']:.2f}x"
    )
    target = spare["checkpoint_s"] + 5
    kept = spare["worlds"] == [n, n]
    met = spare["lost_s"] <= target
    print(
        f"spare: worlds {'→'.join(map(str, spare['worlds']))} (unchanged: "
        f"{'yes' if kept else 'NO'}), training time lost {spare['lost_s']:.1f} s, target "
        f"C + 5 s = {target:.1f} s: {'met' if met else 'MISSED'}; steps lost: "
        f"{spare['steps_lost']}; the next step started beside the training (make before "
        f"break): {'yes' if spare['early'] else 'no'}"
    )
    lost = [r["steps_lost"] for r in runs.values()]
    ok = kept and not any(lost) and (met or args.quick)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
