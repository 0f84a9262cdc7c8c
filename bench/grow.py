"""Growing back against keeping the nodes a job started on, on the same capacity schedule.

The drill's training job (torchrun over gloo, ``nodes = "MIN-MAX"``, 1-2 by default, a
fixed global batch split over the ranks: a step takes a node ``step_seconds``, so N nodes
train N times as fast) starts while all but MIN preemptible nodes are drained (capacity
not yet back), so it runs on MIN nodes; at step ``--back-at`` the others return. Once with
``grow = false`` (the job keeps its MIN nodes to its end) and once with grow back on (the
default: after ``grow_settle`` seconds the job hands over to a MAX-node successor).
Printed for each: the wall time from submit to the end, the node-hours the run's jobs
held (from the ledger: each attempt's nodes times its time), useful steps per node-hour,
the cost at the preemptible price (half the standard one), and for the grow, the nodes'
return → the first step trained on MAX nodes against the target C + 20 s (C: the stop
checkpoint's write time), and the steps lost (0: it resumed from the checkpoint it
stopped at).

Usage: python bench/grow.py [--nodes 1-2] [--tuned-timings] [--steps 1500] [--back-at 100]
                            [--slurm 22.05] [--quick]
(``--nodes 2-4`` brings up a sandbox of 4 preemptible nodes and a standard one)
(stock timings by default: what users live with; --quick: the timings that are up,
fewer steps, the target reported but not enforced: CI's smoke test).
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
from slurmpre.drill.run import bring_up, wait_whole
from slurmpre.drill.train import LOG
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import Checkpoint, Notice, Start, Successor
from slurmpre.lines import sent_to
from slurmpre.login.submit import submit
from slurmpre.placement.facts import node_seconds
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.slurm.parse import format_version

from inplace import jsonl, wait

ROOT = Path(__file__).resolve().parent.parent
PRICE = 0.5  # preemptible, per node-hour, against 1.0 for a standard node


def one(box: Sandbox, work: Path, grow: bool, args: argparse.Namespace) -> dict[str, Any]:
    raw = tomllib.loads((ROOT / "examples" / "drill.toml").read_text())
    opts = DrillOptions(window=120, steps=args.steps, step_seconds=0.2, every=1000)
    folder = work / ("grow" if grow else "keep")
    low, high = args.low, args.high
    spec = drill_spec(
        raw, opts, folder, name=folder.name, nodes=f"{low}-{high}", restart="successor",
        grow=grow,
    )  # fmt: skip
    wait_whole(box)
    nodes = sorted(n.name for n in box.client.nodes() if "preemptible" in n.features)
    away = nodes[low:high]
    for node in away:
        box.client.update_node(node, state="DRAIN", reason="capacity not yet back")
    try:
        submitted = time.time()
        first = submit(spec, box.client).job_id
        log = folder / LOG
        wait(f"step {args.back_at}", lambda: steps(log) >= args.back_at, 600)
        for node in away:
            box.client.update_node(node, state="RESUME")
        back = time.time()
        jobs, info = follow(box, folder, first)
    finally:
        for node in away:
            if box.client.nodes([node])[0].draining:  # an idle node's RESUME is refused
                box.client.update_node(node, state="RESUME")
    if info.state != "COMPLETED":
        raise SystemExit(f"bench: job {jobs[-1]} ended {info.state}; logs in {folder / 'logs'}")
    ended = time.time()
    records = Ledger(folder).records()
    events = jsonl(log)
    held = sum(node_seconds(records, ended).values())  # as status counts them
    trained = opts.training_steps()
    out: dict[str, Any] = {
        "jobs": jobs,
        "wall_s": ended - submitted,
        "node_h": held / 3600,
        "steps_per_node_h": trained / (held / 3600),
        "cost": held / 3600 * PRICE,
        "worlds": [e["world"] for e in events if e["event"] == "begin"],
    }
    notice = next((r for r in records if isinstance(r, Notice) and r.kind == "grow"), None)
    grown = next((e for e in events if e["event"] == "begin" and e["world"] == high), None)
    if notice is not None and grown is not None:
        on_all = next(e for e in events if e["event"] == "step" and e["t"] > grown["t"])
        stop = max(
            (r for r in records if isinstance(r, Checkpoint) and r.after_notice),
            key=lambda r: r.step,
        )
        out.update(
            back_to_max_s=on_all["t"] - back,
            checkpoint_s=stop.seconds or 0.0,
            steps_lost=stop.step - grown["resumed_step"],
        )
    return out


def follow(box: Sandbox, folder: Path, first: str) -> tuple[list[str], Any]:
    """The run's jobs, from ``first`` to the last it handed over to, and how that one
    ended, once it has."""
    jobs = [first]
    while True:
        info = wait_end(box, jobs[-1])
        handed = {
            r.successor
            for r in Ledger(folder).records()
            if isinstance(r, Successor) and r.job == jobs[-1]
        }
        if not handed:
            return jobs, info
        jobs.append(wait("the next job's start", lambda h=handed: started(folder, h), 600))


def wait_end(box: Sandbox, job: str) -> Any:
    return wait(f"job {job}'s end", lambda: (i := box.client.job(job)).finished and i, 1800)


def started(folder: Path, jobs: set[str]) -> str | None:
    """The one of ``jobs`` (a successor, its twin) that started training the run."""
    starts = [r.job for r in Ledger(folder).records() if isinstance(r, Start) and r.job in jobs]
    return starts[0] if starts else None


def shaped(box: Sandbox, nodes: int, preemptible: int, stock: bool, slurm: str | None) -> str:
    """The sandbox up with ``nodes`` nodes, ``preemptible`` of them preemptible, on stock or
    tuned timings (brought down and up again when it is up in another shape); its timings."""
    current = box.load()
    timings = "stock" if stock else "tuned"
    if current is not None and (
        len(current.nodes),
        sum(bool(n["preemptible"]) for n in current.nodes),
        current.timings,
    ) != (nodes, preemptible, timings):
        with sent_to(print, "slurmpre.sandbox"):
            box.down()
    if box.load() is None:
        with sent_to(print, "slurmpre.sandbox"):
            box.up(nodes, preemptible, stock_timings=stock, slurm=slurm)
    return box.current().timings


def steps(log: Path) -> int:
    return sum(e["event"] == "step" for e in jsonl(log))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", default="1-2", help="the job's range, MIN-MAX")
    parser.add_argument("--tuned-timings", action="store_true")
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--back-at", type=int, default=100)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--slurm", default=None, help="the release (default: 26.05)")
    args = parser.parse_args()
    low, _, high = args.nodes.partition("-")
    if not (low.isdigit() and high.isdigit() and 1 <= int(low) < int(high)):
        raise SystemExit(f"bench: --nodes {args.nodes!r}: give MIN-MAX, 1 <= MIN < MAX")
    args.low, args.high = int(low), int(high)
    box = Sandbox.here()
    if args.quick:
        args.steps, args.back_at = 300, 40
    if args.quick and box.load() is not None:
        timings = box.current().timings
    elif args.high > 2:  # more preemptible nodes than the drill's sandbox has
        timings = shaped(box, args.high + 1, args.high, not args.tuned_timings, args.slurm)
    else:
        opts = DrillOptions(stock_timings=not args.tuned_timings)
        with sent_to(print, "slurmpre.drill", "slurmpre.sandbox"):
            timings = bring_up(box, opts, args.slurm)
    box.use()
    version = format_version(box.client.version())
    work = Path(tempfile.mkdtemp(prefix="bench-grow-", dir="/var/lib/slurmpre"))
    work.chmod(0o755)
    runs = {name: one(box, work, name == "grow back", args) for name in ("keep", "grow back")}
    print(
        f'\nSlurm {version}, {timings} timings; nodes = "{args.nodes}", {args.steps} steps '
        f"of a fixed global batch (0.2 s per step on one node); {args.high - args.low} "
        f"drained preemptible node(s) return at step {args.back_at}; price {PRICE:g} per "
        "preemptible node-hour"
    )
    print(f"  {'':<12} {'worlds':>7} {'wall s':>7} {'node-h':>7} {'steps/node-h':>13} {'cost':>7}")
    for name, run in runs.items():
        print(
            f"  {name:<12} {'→'.join(map(str, run['worlds'])):>7} {run['wall_s']:>7.0f} "
            f"{run['node_h']:>7.3f} {run['steps_per_node_h']:>13.0f} {run['cost']:>7.3f}"
        )
    keep, grow = runs["keep"], runs["grow back"]
    print(f"\nratio, keep / grow (wall): {keep['wall_s'] / grow['wall_s']:.2f}x; "
          f"cost: {grow['cost'] / keep['cost']:.2f}x")  # fmt: skip
    if "back_to_max_s" not in grow:
        print(f"the grow to {args.high} nodes never happened: MISSED")
        return 1
    target = grow["checkpoint_s"] + 20
    verdict = "met" if grow["back_to_max_s"] <= target else "MISSED"
    print(
        f"nodes back → training on {args.high} nodes: {grow['back_to_max_s']:.1f} s (settle time "
        f"included), target C + 20 s = {target:.1f} s: {verdict}; steps lost: "
        f"{grow['steps_lost']}"
    )
    ok = grow["steps_lost"] == 0 and (verdict == "met" or args.quick)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
