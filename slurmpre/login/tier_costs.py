"""What the node-local tier (`local_dir`) changes in a plan: the training waits for the save
on the nodes and the pull, not the flush (docs/plan.md, "With the state off the node").
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from slurmpre.folder.records import Checkpoint, Pulled, Record, Saved


class Facts(Protocol):
    """What a plan's inputs say of the run (`slurmpre.login.plan.Inputs`)."""

    @property
    def mtbf_s(self) -> float: ...

    @property
    def restart_s(self) -> float: ...

    @property
    def window_s(self) -> float: ...

    @property
    def margin_s(self) -> float: ...

    @property
    def notice_s(self) -> float: ...

    @property
    def price(self) -> float: ...

    @property
    def discount(self) -> float: ...


@dataclass(frozen=True)
class TierCosts:
    save_s: float  # the training stops this long for a save on the nodes
    pull_s: float  # the job that takes over pulls it this fast
    flush_s: float | None = None  # the background write to the shared volume (measured)


def measured(records: Sequence[Record]) -> tuple[float | None, float | None, float | None]:
    """The medians the ledgers hold: save on the nodes, pull, flush (None: none seen)."""
    saves = [r.seconds for r in records if isinstance(r, Saved)]
    pulls = [r.seconds for r in records if isinstance(r, Pulled) and r.ok]
    flushes = [r.flush_seconds for r in records
               if isinstance(r, Checkpoint) and r.flush_seconds is not None]  # fmt: skip
    return tuple(statistics.median(x) if x else None for x in (saves, pulls, flushes))  # type: ignore[return-value]


@dataclass(frozen=True)
class Row:
    fits: bool
    goodput: float | None
    cost: float | None


def row(i: Facts, costs: TierCosts) -> Row:
    paid = costs.save_s + costs.pull_s
    fits = i.notice_s + paid <= i.window_s - i.margin_s
    if not fits:
        return Row(False, None, None)
    goodput = i.mtbf_s / (i.mtbf_s + paid + i.restart_s)
    return Row(True, goodput, i.price * (1 - i.discount) / goodput)


def lines(i: Facts, costs: TierCosts) -> list[str]:
    r = row(i, costs)
    flush = f", flush {costs.flush_s:.4g} s in the background" if costs.flush_s else ""
    head = (
        f"state off the node: save on the nodes {costs.save_s:.4g} s, "
        f"pull {costs.pull_s:.4g} s{flush}"
    )
    if r.goodput is None:
        return [head, f"just in time with local_dir does not fit: notice {i.notice_s:g} s + save "
                      f"+ pull > window {i.window_s:g} s - margin {i.margin_s:g} s"]  # fmt: skip
    label = "preemptible, just in time + local_dir"
    return [head, f"{label:38}{r.goodput:>9.3f}{'$' + format(r.cost, '.3f'):>22}"]


def as_dict(i: Facts, costs: TierCosts) -> dict[str, Any]:
    r = row(i, costs)
    return {
        "save_on_nodes_seconds": costs.save_s,
        "pull_seconds": costs.pull_s,
        "flush_seconds": costs.flush_s,
        "fits_in_window": r.fits,
        "goodput": r.goodput,
        "cost_per_useful_gpu_hour": r.cost,
    }
