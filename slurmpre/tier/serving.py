"""Where each node of an attempt serves its node-local checkpoints, from the ledger: its
wrapper records it (`Serving`) once its server is up (`slurmpre.tier.handoff.serve`).
Standard library and the ledger's records only: the job side reads it at start-up."""

from __future__ import annotations

from collections.abc import Sequence

from slurmpre.folder.records import AttemptId, Record, Serving, Start

SERVE_WAIT = 15.0  # seconds node 0 waits for the nodes of a step to serve (their tier up)


def serving(records: Sequence[Record], job: str, at: AttemptId) -> dict[str, str]:
    """Node name -> ``host:port`` for each node of attempt ``at`` of ``job`` that serves."""
    return {r.node: f"{r.host}:{r.port}" for r in records
            if isinstance(r, Serving) and r.job == job and r.attempt_id == at}  # fmt: skip


def nodes_of(records: Sequence[Record], job: str, at: AttemptId) -> tuple[str, ...] | None:
    """The nodes attempt ``at`` trained on, in their order (its `Start`); None before."""
    started = [r for r in records if isinstance(r, Start) and r.job == job and r.attempt_id == at]
    return started[-1].nodes if started else None


def all_of(records: Sequence[Record], job: str, at: AttemptId) -> list[str] | None:
    """Where every node of attempt ``at`` serves, in its nodes' order; None until all do."""
    nodes, where = nodes_of(records, job, at), serving(records, job, at)
    if nodes is None or not set(nodes) <= set(where):
        return None
    return [where[n] for n in nodes]
