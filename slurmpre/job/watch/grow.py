"""Grow back: a job on fewer nodes than its range allows notices idle preemptible nodes
(its own notice, kind ``grow``, from the drain board's poll of every node, never Slurm
on its own) and hands over to a bigger successor. See docs/how-it-works.md ("Growing
back when capacity returns").
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from slurmpre import defaults
from slurmpre.folder.layout import STALE, file_tag
from slurmpre.job.watch.notice import Notice, NoticeSource
from slurmpre.slurm.parse import NodeInfo

# How long a job trains on beside its bigger successor, waiting for it to start on idle
# nodes alone (make before break), before it checkpoints and stops anyway.
GROW_WAIT = 60.0
# The twin of the script's own shape, in case the idle nodes are taken meanwhile, is held
# this much longer than the successor's expected start (`Restarts.grow`).
TWIN_AFTER = 120.0


@dataclass(frozen=True)
class GrowPlan:
    have: int  # nodes the job trains on now
    to: int  # the bigger successor's node count
    idle: tuple[str, ...]  # the preemptible nodes that have stayed idle long enough
    at_once: bool  # they alone can hold the successor: it starts while this job trains

    def why(self, settle: float) -> str:
        how = (
            "it starts on idle nodes while this one trains"
            if self.at_once
            else "it starts on this job's nodes and the idle ones"
        )
        return (
            f"{len(self.idle)} preemptible node(s) idle for {settle:g} s or more "
            f"({', '.join(self.idle)}): growing from {self.have} to {self.to} nodes ({how})"
        )


def usable(node: NodeInfo) -> bool:
    """A node a grown job could start on: idle, in service, with the feature."""
    return (
        defaults.PREEMPTIBLE_FEATURE in node.features
        and node.state == "IDLE"
        and not node.flags
        and not node.draining
        and not node.down
    )


def writing_checkpoint(folder: Path, attempt_prefix: str) -> bool:
    """This attempt is writing a checkpoint now (an ``.incoming-step-...`` of its own)."""
    tag = f"-{file_tag(attempt_prefix)}"
    try:
        with os.scandir(folder) as entries:
            return any(
                e.name.startswith(".incoming-step-") and tag in e.name and STALE not in e.name
                for e in entries
            )
    except OSError:
        return True  # cannot tell: do not grow now


class GrowSource(NoticeSource):
    """The ``grow`` notice: idle preemptible nodes, settled, worth a hand-over."""

    name = "grow"

    def __init__(
        self,
        every_node: Callable[[], Sequence[NodeInfo]],
        nodes: Sequence[str],
        grow_to: int,
        *,
        settle: float = defaults.GROW_SETTLE,
        min_gain: int = 1,
        writing: Callable[[], bool] = lambda: False,
        wall: Callable[[], float] = time.time,
        every: float | None = None,
        spares: int = 0,
    ) -> None:
        """``spares``: the spares a job holds beside its training nodes (`spare_nodes`),
        which the bigger job holds too."""
        self.every_node, self.nodes, self.grow_to = every_node, tuple(nodes), grow_to
        self.spares = spares
        self.settle, self.min_gain, self.writing, self.wall = settle, min_gain, writing, wall
        self.every = every
        self.idle_since: dict[str, float] = {}  # wall clock: first seen idle, in a row
        self.plan: GrowPlan | None = None  # the grow its notice asks for

    def refused(self) -> None:
        """The bigger job could not be submitted (Slurm 22.05 refuses job updates for a
        while after a resize: "the DB index is being set"): try again once the idle nodes
        have stayed idle for the settle time again."""
        self.plan = None
        self.idle_since = {}

    def poll(self) -> list[Notice]:
        now = self.wall()
        nodes = self.every_node()
        own = [n for n in nodes if n.name in self.nodes]
        if any(defaults.PREEMPTIBLE_FEATURE not in n.features for n in own):
            # On standard nodes (a coordinator, or a run a deadline moved there): the
            # bigger job could not start on the idle preemptible nodes, and where the run
            # goes back to them is the placement's call.
            return []
        idle = {n.name for n in nodes if usable(n) and n.name not in self.nodes}
        self.idle_since = {name: self.idle_since.get(name, now) for name in sorted(idle)}
        settled = tuple(n for n, t in self.idle_since.items() if now - t >= self.settle)
        have = len(self.nodes)
        gain = min(len(settled), self.grow_to - have)
        if gain < max(self.min_gain, 1) or self.plan is not None or self.writing():
            return []
        at_once = len(settled) >= have + gain + self.spares
        plan = GrowPlan(have, have + gain, settled, at_once=at_once)
        self.plan = plan
        why = plan.why(self.settle)
        return [Notice("grow", None, why, now, grow_to=plan.to, at_once=plan.at_once)]
