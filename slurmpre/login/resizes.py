"""The run's resizes, as `slurmpre status` tells them: each change of the nodes it trains
on between two attempts (a shrink in place, a grow to a bigger job, a successor on fewer
nodes, a spare taking a drained node's place), and each spare lost while it trained;
with the cause, when, and what the change cost (`spare_nodes`: spares are held nodes)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from slurmpre.placement.policy import STANDARD


class Row(Protocol):
    """What a resize reads of an attempt (`slurmpre.login.status.AttemptRow`)."""

    @property
    def nodes(self) -> tuple[str, ...]: ...
    @property
    def started_at(self) -> float | None: ...
    @property
    def ended(self) -> str: ...
    @property
    def gap_s(self) -> float | None: ...
    @property
    def on(self) -> str: ...
    @property
    def spares(self) -> tuple[str, ...]: ...
    @property
    def spares_in(self) -> tuple[str, ...]: ...
    @property
    def spares_lost(self) -> tuple[tuple[float | None, tuple[str, ...]], ...]: ...


class Prices(Protocol):
    """The price per GPU-hour and the preemptible discount (`slurmpre.login.status.Prices`)."""

    @property
    def price(self) -> float: ...
    @property
    def discount(self) -> float: ...


@dataclass(frozen=True)
class Resize:
    """The time from the end of the one attempt to the start of the other, and its cost
    with the new nodes held (none for a spare released while the training went on)."""

    at: float | None  # when the attempt on the new nodes started (a spare lost: released)
    nodes_from: int
    nodes_to: int
    kind: str  # "grow", "shrink", "spare swap" (as many nodes), or "spare lost"
    cause: str  # how the attempt before ended
    gap_s: float | None
    cost: float | None  # gap_s on nodes_to nodes (GPUs), at their kind's price

    def line(self, clock: str) -> str:
        took = "" if self.gap_s is None else f", {max(self.gap_s, 0):.0f} s between"
        cost = "" if self.cost is None else f" (${self.cost:.2f})"
        return (
            f"{self.kind} at {clock}: {self.nodes_from} -> {self.nodes_to} nodes "
            f"({self.cause}){took}{cost}"
        )


def resizes(rows: Sequence[Row], prices: Prices, gpus_per_node: int = 0) -> list[Resize]:
    out = []
    for i, before in enumerate(rows):
        after = rows[i + 1] if i + 1 < len(rows) else None
        out += [
            Resize(at, len(before.nodes), len(before.nodes), "spare lost",
                   f"{', '.join(gone)} drained: released while the training went on", None, None)
            for at, gone in before.spares_lost
        ]  # fmt: skip
        if after is None or not before.nodes or not after.nodes:
            continue
        swapped = bool(before.spares_in) and len(before.nodes) == len(after.nodes)
        if len(before.nodes) == len(after.nodes) and not swapped:
            continue
        gap = before.gap_s
        price = prices.price * (1 if after.on == STANDARD else 1 - prices.discount)
        units = (len(after.nodes) + len(after.spares)) * (gpus_per_node or 1)
        grew = len(after.nodes) > len(before.nodes)
        kind = "spare swap" if swapped else "grow" if grew else "shrink"
        cause = before.ended + (f"; spare {', '.join(before.spares_in)} in" if swapped else "")
        out.append(Resize(
            after.started_at, len(before.nodes), len(after.nodes), kind, cause, gap,
            None if gap is None else max(gap, 0.0) / 3600 * units * price,
        ))  # fmt: skip
    return out
