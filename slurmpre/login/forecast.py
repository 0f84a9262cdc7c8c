"""``slurmpre plan --deadline``: the chance to make a deadline, and what each placement
policy costs, by replaying the run's remaining work over capacity traces
(`slurmpre.placement.replay`, the decision code a job runs). Each input: the option, else
the run's ledger, else a one-line error naming the option.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurmpre import defaults, keys
from slurmpre.errors import UsageError
from slurmpre.folder.records import Record, Start
from slurmpre.login.plan import Sources, ledgers, measure
from slurmpre.placement import deadline as deadlines
from slurmpre.placement import facts as run_facts
from slurmpre.placement.replay import POLICIES, Scene, replay_all


@dataclass(frozen=True)
class Asked:
    """What the user gave (None: measure it from the ledger)."""

    deadline: str
    total_steps: int | None = None
    steps_done: int | None = None
    rate: float | None = None  # steps per second
    mtbf_s: float | None = None
    wait_s: float | None = None  # mean time capacity stays away after a preemption
    restart_s: float | None = None
    checkpoint_s: float | None = None
    nodes: int | None = None
    gpus_per_node: int | None = None  # None: the spec's (0: no GPU, a node-hour's price)
    spec: Path | None = None  # the job's spec, for its GPUs a node
    price: float = defaults.ON_DEMAND_PRICE  # $ per GPU-hour on demand
    discount: float = defaults.PREEMPTIBLE_DISCOUNT
    traces: int = 200
    seed: int | None = None  # None: drawn (and said) by the caller


@dataclass(frozen=True)
class Forecast:
    scene: Scene
    nodes: int
    gpus_per_node: int
    price_node_s: float  # standard price of one node-second, in $
    sources: tuple[str, ...]
    results: dict[str, dict[str, float]]

    def as_dict(self) -> dict[str, Any]:
        s = self.scene
        return {
            "work_s": s.work_s,
            "deadline_in_s": s.deadline_s,
            "mtbf_s": s.up_s,
            "wait_s": s.down_s,
            "restart_s": s.restart_s,
            "checkpoint_s": s.checkpoint_s,
            "nodes": self.nodes,
            "gpus_per_node": self.gpus_per_node,
            "sources": list(self.sources),
            "policies": self.results,
        }


def forecast(folders: list[Path], asked: Asked, *, now: float | None = None) -> Forecast:
    now = time.time() if now is None else now
    records = ledgers(folders)
    facts = run_facts.read(records)
    when = deadlines.parse(asked.deadline, first_submit=facts.first_submit or now, key="--deadline")
    if when <= now:
        raise UsageError(f"--deadline {asked.deadline!r}: already past")
    seen = measure(records)
    found = Sources(bool(folders))
    pick = found.pick

    total = pick(asked.total_steps, None, "--total-steps", "total steps")
    done = asked.steps_done if asked.steps_done is not None else facts.steps_done
    rate = pick(asked.rate, facts.rate, "--rate", "steps per second")
    mtbf = pick(asked.mtbf_s, seen.mtbf_s, "--mtbf", "running time per preemption (s)")
    restart = pick(asked.restart_s, seen.restart_s, "--restart-seconds", "restart (s)")
    wait = pick(asked.wait_s, seen.restart_s, "--wait-seconds", "wait for capacity (s)")
    ckpt = pick(asked.checkpoint_s, seen.checkpoint_s, "--checkpoint-seconds", "checkpoint (s)")
    found.check()
    for flag, value in (("--rate", rate), ("--mtbf", mtbf), ("--wait-seconds", wait)):
        if not math.isfinite(value) or value <= 0:
            raise UsageError(f"{flag} {value:g}: must be a finite number, more than 0")
    gpus = _gpus_per_node(asked)
    nodes = asked.nodes or _nodes(records) or 1
    scene = Scene(
        work_s=max(0, int(total) - done) / rate,
        deadline_s=when - now,
        up_s=mtbf,
        down_s=wait,
        restart_s=restart,
        checkpoint_s=ckpt,
        discount=asked.discount,
    )
    runs = replay_all(scene, asked.traces, asked.seed or 0)
    price_node_s = asked.price * max(gpus, 1) / 3600  # as `status` counts a run's cost
    results = {}
    for policy in POLICIES:
        outs = runs[policy]
        finished = [o.finished_s for o in outs if o.finished_s is not None]
        median = statistics.median(finished) if finished else math.inf
        results[policy] = {
            "chance": sum(o.met for o in outs) / len(outs),
            "cost": statistics.mean(o.cost for o in outs) * nodes * price_node_s,
            "finish_s": median,
            "moves": statistics.mean(o.moves for o in outs),
        }
    return Forecast(scene, nodes, gpus, price_node_s, tuple(found.lines), results)


def _gpus_per_node(asked: Asked) -> int:
    """A node's GPUs, which its price is counted by: --gpus-per-node, else the spec's
    (its gpus_per_node, or its gpus over its nodes when their count is fixed); never
    assumed (providers' nodes hold 1 to 8 and more)."""
    given = asked.gpus_per_node
    if given is not None:
        if (why := keys.in_range("gpus_per_node", given)) is not None:
            raise UsageError(f"--gpus-per-node {given}: {why}")
        return given
    if asked.spec is None:
        raise UsageError(
            "no GPUs per node to price a node by: give --gpus-per-node N, or --spec with "
            "the job's spec (its gpus_per_node)"
        )
    from slurmpre.login.spec import load

    spec = load(asked.spec)
    if not spec.gpus:
        return spec.gpus_per_node
    if spec.nodes.min != spec.nodes.max:
        raise UsageError(
            f"{asked.spec}: gpus = {spec.gpus} over {spec.nodes.min}-{spec.nodes.max} nodes "
            "is no one count a node: give --gpus-per-node"
        )
    return -(-spec.gpus // spec.nodes.max)


def lines(f: Forecast) -> list[str]:
    s = f.scene
    out = [
        f"deadline in {(s.deadline_s or 0) / 3600:.1f} h; work left {s.work_s / 3600:.1f} h on "
        f"{f.nodes} node(s); preemptible capacity stays {s.up_s / 3600:.2g} h and is gone "
        f"{s.down_s / 60:.3g} min at a time (mean, {s.availability:.0%} there)",
        *(f"  measured: {x}" for x in f.sources),
        f"{'policy':<20} {'makes it':>9} {'expected cost':>14} {'finish (median)':>16}",
    ]
    for policy, r in f.results.items():
        finish = "never" if math.isinf(r["finish_s"]) else f"{r['finish_s'] / 3600:.1f} h"
        cost = f"${r['cost']:,.2f}"
        out.append(f"{policy:<20} {r['chance']:>9.0%} {cost:>14} {finish:>16}")
    gpus = f"{f.gpus_per_node} GPU(s)" if f.gpus_per_node else "no GPU: priced per node-hour"
    out.append(
        "fallback is what a job with this deadline does (docs/deadlines.md); cost at "
        f"${f.price_node_s * 3600:,.2f} a standard node-hour ({gpus})"
    )
    return out


def _nodes(records: list[Record]) -> int | None:
    counts = [r.num_nodes or len(r.nodes) for r in records if isinstance(r, Start)]
    return counts[-1] if counts else None
