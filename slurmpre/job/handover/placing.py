"""Where a successor trains: the placement policy asked at the hand-over, and the sbatch
options that put the new job on standard nodes.

Standard nodes, on this provider's clusters, are the nodes without the ``preemptible``
feature. No supported release negates a feature in ``--constraint`` (26.05's sbatch
answers "Invalid feature specification" to ``!preemptible``), so a successor bound for
standard nodes clears the recorded script's constraint (``--constraint=`` on the
command line wins over the script's ``#SBATCH`` line) and excludes every node that
carries the feature, by name, as Slurm lists them at the hand-over.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from slurmpre import defaults
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import Record
from slurmpre.job.watch.notice import NodeView, Notice, NoticeSource
from slurmpre.placement import facts as run_facts
from slurmpre.placement.policy import (
    PREEMPTIBLE,
    STANDARD,
    TRAINING,
    WAITING,
    Decision,
    Goals,
    Situation,
    backoff,
    decide,
)
from slurmpre.slurm.parse import NodeInfo


@dataclass(frozen=True)
class Placement:
    decision: Decision
    situation: Situation
    args: tuple[str, ...]  # sbatch options for the successor (none: the script's own)
    # Waiting on preemptible nodes, the moment the policy would stop waiting (None: never),
    # and the options of a twin on standard nodes that Slurm holds until then (`twins`).
    twin_at: float | None = None
    twin_args: tuple[str, ...] = ()


STEPS = 2000  # looks ahead at most this many times (30 s apart, or wider for a far deadline)


def switch_at(asked: Situation) -> float | None:
    """When a run that waits from ``asked.now`` on, with no preemptible node coming, would
    be sent to standard nodes by the policy; None when it never would (no deadline and no
    wait bound)."""
    if asked.deadline is not None:
        until = asked.deadline
    elif asked.max_wait_s is not None:
        until = asked.now + asked.max_wait_s
    else:
        return None
    step = max(30.0, (until - asked.now) / STEPS)
    t = asked.now
    while t <= until + step:
        later = replace(asked, now=t, waiting_s=asked.waiting_s + (t - asked.now))
        if decide(later).where == STANDARD:
            return t
        t += step
    return None


def idle_enough(nodes: Sequence[NodeInfo], exclude: Sequence[str], needed: int) -> bool:
    """Whether ``needed`` preemptible nodes are idle now (not draining, not excluded)."""
    idle = [
        n
        for n in nodes
        if defaults.PREEMPTIBLE_FEATURE in n.features
        and n.state == "IDLE"
        and not n.draining
        and not n.down
        and n.name not in exclude
    ]
    return len(idle) >= needed


def standard_args(nodes: Sequence[NodeInfo], exclude: Sequence[str]) -> tuple[str, ...]:
    """sbatch options that keep a job off every preemptible node (see the module's text)."""
    names = sorted(
        {n.name for n in nodes if defaults.PREEMPTIBLE_FEATURE in n.features} | {*exclude}
    )
    return ("--constraint=", f"--exclude={','.join(names)}") if names else ("--constraint=",)


def held_back(goals: Goals, records: Sequence[Record], *, now: float) -> Placement | None:
    """For a run that may not move: after preemptions faster than progress, the successor
    waits (`policy.backoff`, ``sbatch --begin``) rather than thrash; None otherwise."""
    facts = run_facts.read(records)
    wait = backoff(facts.storm)
    if not wait:
        return None
    why = (
        f"{facts.storm} preemptions in a row came faster than progress: the successor "
        f"waits {wait:.0f} s"
    )
    asked = run_facts.situation(goals, facts, now=now, doing=WAITING, idle_preemptible=False)
    return Placement(Decision(PREEMPTIBLE, why), asked, (f"--begin=now+{round(wait)}",))


def place(
    goals: Goals,
    records: Sequence[Record],
    nodes: Sequence[NodeInfo],
    exclude: Sequence[str],
    *,
    now: float,
    needed: int,
) -> Placement | None:
    """Where the successor should train, or None when the spec asks nothing of it."""
    if not goals.may_move:
        return None
    facts = run_facts.read(records)
    asked = run_facts.situation(
        goals,
        facts,
        now=now,
        doing=WAITING,
        idle_preemptible=idle_enough(nodes, exclude, needed),
    )
    decision = decide(asked)
    if decision.where == STANDARD:
        return Placement(decision, asked, standard_args(nodes, exclude))
    # The successor waits on preemptible nodes (back there, too): when would it stop?
    twin_at = switch_at(replace(asked, on=PREEMPTIBLE, idle_preemptible=False))
    if twin_at is None:
        return Placement(decision, asked, ())
    delay = max(1, round(twin_at - now))
    twin_args = (*standard_args(nodes, exclude), f"--begin=now+{delay}")
    return Placement(decision, asked, (), twin_at, twin_args)


class ReturnSource(NoticeSource):
    """A notice of its own for a run on standard nodes with a deadline: preemptible
    nodes are idle again and the policy says go back (ahead of the line, slack to spare).
    The hand-over that follows is the usual one (make before break, a successor with the
    recorded script's own constraint). It asks Slurm once a minute, only while the run
    trains on standard nodes (the ledger's last decision)."""

    name = "placement"

    def __init__(
        self,
        goals: Goals,
        ledger: Ledger,
        client: NodeView,
        needed: int,
        *,
        every: float = 60.0,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.goals, self.ledger, self.client = goals, ledger, client
        self.needed, self.every, self.wall = needed, every, wall

    def poll(self) -> list[Notice]:
        facts = run_facts.read(self.ledger.records())
        if facts.on != STANDARD or not self.goals.deadline:
            return []
        now = self.wall()
        asked = run_facts.situation(
            self.goals,
            facts,
            now=now,
            doing=TRAINING,
            idle_preemptible=idle_enough(self.client.nodes(), (), self.needed),
        )
        decision = decide(asked)
        if decision.where != PREEMPTIBLE:
            return []
        return [Notice("placement", None, f"back to preemptible nodes: {decision.why}", now)]
