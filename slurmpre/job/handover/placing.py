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

from collections.abc import Sequence
from dataclasses import dataclass

from slurmpre import defaults
from slurmpre.folder.records import Record
from slurmpre.placement import facts as run_facts
from slurmpre.placement.policy import STANDARD, WAITING, Decision, Goals, Situation, decide
from slurmpre.slurm.parse import NodeInfo


@dataclass(frozen=True)
class Placement:
    decision: Decision
    situation: Situation
    args: tuple[str, ...]  # sbatch options for the successor (none: the script's own)


def preemptible(nodes: Sequence[NodeInfo]) -> list[str]:
    return [n.name for n in nodes if defaults.PREEMPTIBLE_FEATURE in n.features]


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
    names = sorted({*preemptible(nodes), *exclude})
    return ("--constraint=", f"--exclude={','.join(names)}") if names else ("--constraint=",)


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
    args = standard_args(nodes, exclude) if decision.where == STANDARD else ()
    return Placement(decision, asked, args)
