"""What hot spares cost and save (``slurmpre plan --spares K``), against handing over to a
successor and shrinking in place then growing back (the model: docs/plan.md, "Spares").
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any

from slurmpre.errors import UsageError
from slurmpre.folder.records import InPlace, InPlaceRequested, Notice, Record, Start
from slurmpre.login.plan import Inputs, Sources


@dataclass(frozen=True)
class SparesInputs:
    nodes: int  # N: training nodes
    spares: int  # K
    mtbf_s: float  # M: running seconds per training-node loss
    checkpoint_s: float  # d
    restart_s: float  # R: a hand-over's, its wait for a node included
    swap_s: float  # S: an in-place restart's
    return_s: float  # T: a lost node's capacity back
    price: float
    discount: float
    sources: tuple[str, ...] = ()

    def check(self) -> None:
        if self.nodes < 1:
            raise UsageError(f"--nodes {self.nodes}: must be 1 or more")
        if not 1 <= self.spares <= 64:  # (`inputs_from` says it first, before asking more)
            raise UsageError(f"--spares {self.spares}: must be from 1 to 64")
        for flag, value in (("--swap-seconds", self.swap_s), ("--return-seconds", self.return_s)):
            if not math.isfinite(value) or value < 0:
                raise UsageError(f"{flag} {value:g}: must be a finite number, 0 or more")


@dataclass(frozen=True)
class Way:
    name: str
    goodput: float | None  # None: this way cannot answer (one node cannot shrink)
    cost: float | None  # per useful GPU-hour
    wall: float | None  # wall hours per useful hour
    why: str = ""


def ways(i: SparesInputs) -> list[Way]:
    """Hand over, shrink and grow back, and the spares: one row each."""
    i.check()
    n, k, m, d = i.nodes, i.spares, i.mtbf_s, i.checkpoint_s
    pre = i.price * (1 - i.discount)

    def way(name: str, useful: float, held: float, lost: float) -> Way:
        goodput = useful / held if held > 0 else 0.0
        cost = pre / goodput if goodput > 0 else math.inf
        return Way(name, goodput, cost, (m + lost) / m)

    out = [way("hand over (a successor)", n * m, n * (m + d + i.restart_s), d + i.restart_s)]
    if n >= 2:
        fewer = min(i.return_s, m)
        lost = 2 * d + i.swap_s + i.restart_s
        # Wall: the restarts, and the work the missing node did not do while it was away.
        out.append(way("shrink in place, grow back", n * m - fewer, n * m - fewer + n * lost,
                       lost + fewer / n))  # fmt: skip
    else:
        out.append(Way("shrink in place, grow back", None, None, None, "one node cannot shrink"))
    s = k / (1 + k / n)
    f = s / (s + 1)
    lost = f * (d + i.swap_s) + (1 - f) * (d + i.restart_s)
    held = (n + k * s / (2 * (s + 1))) * (m + lost)
    out.append(way(f"{k} spare(s), swapped in place", n * m, held, lost))
    return out


def measure_swap(records: list[Record]) -> float | None:
    """The median in-place restart: the request -> the next step's start (not an early
    request: the training goes on after it, until the next step waits)."""
    starts = {(r.job, r.attempt_id): r.time for r in records if isinstance(r, Start)}
    took = []
    for r in records:
        if isinstance(r, InPlaceRequested) and not r.early:
            nxt = starts.get((r.job, r.attempt_id.step_after))
            if nxt is not None:
                took.append(nxt - r.requested_at)
    return statistics.median(took) if took else None


def measure_return(records: list[Record]) -> float | None:
    """The median time on fewer nodes: a shrink in place -> the grow back that followed."""
    shrinks = sorted(
        r.released_at for r in records if isinstance(r, InPlace) and not r.spares_in and r.released
    )
    grows = [r.seen_at for r in records if isinstance(r, Notice) and r.kind == "grow"]
    took = []
    for grew in grows:
        before = [t for t in shrinks if t <= grew]
        if before:
            took.append(grew - before[-1])
    return statistics.median(took) if took else None


def measure_nodes(records: list[Record]) -> float | None:
    """The training nodes of the newest attempt."""
    starts = [r for r in records if isinstance(r, Start)]
    return float(len(starts[-1].nodes)) if starts else None


def inputs_from(
    records: list[Record],
    plan: Inputs,
    *,
    spares: int,
    nodes: int | None,
    swap_s: float | None,
    return_s: float | None,
    from_folders: bool,
) -> SparesInputs:
    """The spares rows' inputs: the plan's (``M``, ``d``, ``R``, prices), and the nodes, the
    in-place restart and the capacity's return: given, else measured in the ledgers (said),
    else one line asking for the option."""
    if not 1 <= spares <= 64:
        raise UsageError(f"--spares {spares}: must be from 1 to 64")
    found = Sources(from_folders)
    n = found.pick(nodes, measure_nodes(records), "--nodes", "training nodes")
    found.unit = " s"
    swap = found.pick(swap_s, measure_swap(records), "--swap-seconds", "in-place restart")
    back = found.pick(return_s, measure_return(records), "--return-seconds", "capacity return")
    found.check()
    if n != int(n):
        raise UsageError(f"--nodes {n:g}: must be a whole number")
    return SparesInputs(
        nodes=int(n), spares=spares, mtbf_s=plan.mtbf_s, checkpoint_s=plan.checkpoint_s,
        restart_s=plan.restart_s, swap_s=swap, return_s=back, price=plan.price,
        discount=plan.discount, sources=tuple(found.lines),
    )  # fmt: skip


def as_dict(i: SparesInputs, rows: list[Way]) -> dict[str, Any]:
    return {
        "inputs": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(i).items()},
        "ways": [asdict(w) for w in rows],
    }


def lines(i: SparesInputs, rows: list[Way]) -> list[str]:
    out = [
        "",
        f"{i.nodes} node(s) training, one lost per {i.mtbf_s / 3600:.2f} h of running; "
        f"in-place restart {i.swap_s:g} s, capacity back {i.return_s:g} s after a loss",
        *([f"measured: {', '.join(i.sources)}"] if i.sources else []),
        f"{'':38}{'goodput':>9}{'per useful GPU-hour':>22}{'wall per useful h':>19}",
    ]
    for w in rows:
        if w.goodput is None:
            out.append(f"{w.name:38}{'-':>9}   {w.why}")
            continue
        out.append(f"{w.name:38}{w.goodput:>9.3f}{f'${w.cost:.3f}':>22}{w.wall:>17.3f} h")
    return out
