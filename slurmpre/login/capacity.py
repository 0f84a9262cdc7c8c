"""Preemptible against standard capacity, from one node query and one job query
(``slurmpre nodes``): the draining nodes, and the user's jobs on them, about to be preempted.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from slurmpre.defaults import PREEMPTIBLE_FEATURE
from slurmpre.slurm.parse import JobInfo, NodeInfo


@dataclass
class Counts:
    nodes: int = 0
    up: int = 0  # usable: accepting work
    allocated: int = 0  # usable and running something
    idle: int = 0
    draining: int = 0
    down: int = 0
    gpus: int = 0
    gpus_up: int = 0
    gpus_allocated: int = 0
    gpus_idle: int = 0


@dataclass(frozen=True)
class Draining:
    node: str
    preemptible: bool
    state: str
    reason: str | None
    since: float | None  # epoch seconds, Slurm's stamp
    jobs: tuple[str, ...]  # the user's jobs on it


@dataclass
class Capacity:
    preemptible: Counts = field(default_factory=Counts)
    standard: Counts = field(default_factory=Counts)
    draining: list[Draining] = field(default_factory=list)
    at_risk: list[str] = field(default_factory=list)  # the user's jobs on draining nodes

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def capacity(nodes: list[NodeInfo], jobs: list[JobInfo], user: str) -> Capacity:
    out = Capacity()
    mine = [j for j in jobs if j.user == user and j.holds_nodes]
    for node in nodes:
        preemptible = PREEMPTIBLE_FEATURE in node.features
        c = out.preemptible if preemptible else out.standard
        c.nodes += 1
        c.gpus += node.gpus
        if node.down:
            c.down += 1
        elif node.draining:
            c.draining += 1
        if node.usable:
            c.up += 1
            c.gpus_up += node.gpus
            c.gpus_allocated += node.gpus_alloc
            c.gpus_idle += max(node.gpus - node.gpus_alloc, 0)
            if node.cpus_alloc > 0 or node.state in ("ALLOCATED", "MIXED"):
                c.allocated += 1
            else:
                c.idle += 1
        if node.draining and not node.down:
            on_it = tuple(j.job_id for j in mine if node.name in j.nodes)
            out.draining.append(
                Draining(
                    node.name,
                    preemptible,
                    "+".join([node.state, *sorted(node.flags)]),
                    node.reason,
                    node.reason_time,
                    on_it,
                )
            )
            out.at_risk += [j for j in on_it if j not in out.at_risk]
    return out


# The table's columns after the class's name: the `Counts` each shows.
_COLUMNS = ("nodes", "up", "allocated", "idle", "draining", "down", "gpus", "gpus_idle")


def lines(cap: Capacity, now: float | None = None) -> list[str]:
    now = time.time() if now is None else now
    head = ["", "nodes", "up", "allocated", "idle", "draining", "down", "GPUs", "GPUs idle"]
    rows = [head]
    for name, c in (("preemptible", cap.preemptible), ("standard", cap.standard)):
        rows.append([name, *(str(getattr(c, column)) for column in _COLUMNS)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    out = [
        "  ".join(
            cell.rjust(w) if i else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in rows
    ]
    for d in cap.draining:
        since = "" if d.since is None else f" for {_ago(now - d.since)}"
        jobs = f"; your jobs on it: {', '.join(d.jobs)}" if d.jobs else ""
        out.append(f"draining {d.node} ({d.state}){since}: {d.reason or 'no reason'}{jobs}")
    if cap.at_risk:
        out.append(f"about to be preempted: job {', '.join(cap.at_risk)}")
    return out


def _ago(seconds: float) -> str:
    seconds = max(seconds, 0)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
