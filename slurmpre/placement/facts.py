"""What a run's ledger says that a placement decision needs: when the run was first
submitted, how far it got, how fast it trains, how long a restart takes, how often it
was preempted, and where it trains now. Read, never guessed: a fact the ledger does not
hold is None (the policy then keeps the run where it is)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from slurmpre import defaults
from slurmpre.folder.records import (
    Checkpoint,
    Claimed,
    End,
    Notice,
    Placed,
    Record,
    Start,
    Submitted,
    Successor,
)
from slurmpre.placement import deadline
from slurmpre.placement.policy import PREEMPTIBLE, STANDARD, Goals, Situation

RESTART_S = 120.0  # a restart's cost until the ledger has measured one


@dataclass(frozen=True)
class Facts:
    first_submit: float | None  # the run's first submission
    steps_done: int  # the newest step a checkpoint or a notice recorded
    rate: float | None  # steps per second of training, over every attempt that trained
    restart_s: float  # hand-over (successor submitted) to the next attempt's start, mean
    preemptions: int  # drains seen, one per attempt
    on: str  # where the run trains: the last decision's, else preemptible
    storm: int = 0  # the last attempts in a row preempted before they trained 2 restarts' time


def read(records: Sequence[Record]) -> Facts:
    """The facts of the run whose ledger holds ``records`` (one folder: one run)."""
    submits = [r.time for r in records if isinstance(r, Submitted) and r.time is not None]
    restart_s = _restart_s(records)
    return Facts(
        first_submit=min(submits) if submits else None,
        steps_done=_steps_done(records),
        rate=_rate(records),
        restart_s=restart_s,
        preemptions=len(
            {(r.job, r.attempt_id) for r in records if isinstance(r, Notice) and r.kind == "drain"}
        ),
        on=_on(records),
        storm=_storm(records, restart_s),
    )


def _storm(records: Sequence[Record], restart_s: float) -> int:
    """How many of the last attempts, in a row, a drain ended before they had trained
    twice their restart's cost: preemptions faster than progress."""
    starts = {(r.job, r.attempt_id): r.time for r in records if isinstance(r, Start)}
    drained = [
        (r.seen_at, starts.get((r.job, r.attempt_id)))
        for r in records
        if isinstance(r, Notice) and r.kind == "drain" and r.first
    ]
    count = 0
    for seen, started in reversed(drained):
        if started is None or seen - started >= 2 * restart_s:
            break
        count += 1
    return count


def _on(records: Sequence[Record]) -> str:
    """Where the run trains: the last decision's kind (none yet: preemptible); after a
    hand-over with a twin, the kind of whichever of the two claimed it."""
    last = next((r for r in reversed(records) if isinstance(r, Placed)), None)
    if last is None:
        return PREEMPTIBLE
    if last.twin is None:
        return last.where
    twin_won = any(isinstance(r, Claimed) and r.job == last.twin for r in records)
    return STANDARD if twin_won else PREEMPTIBLE


def _steps_done(records: Sequence[Record]) -> int:
    steps = [r.step for r in records if isinstance(r, Checkpoint)]
    steps += [r.step_at_notice for r in records if isinstance(r, Notice) and r.step_at_notice]
    return max(steps, default=0)


def _rate(records: Sequence[Record]) -> float | None:
    """Steps per second: each attempt's steps from its start to its last checkpoint (or
    notice), over the seconds between, summed over the attempts."""
    starts: dict[tuple[str, object], tuple[int, float]] = {
        (r.job, r.attempt_id): (r.step or 0, r.time)
        for r in records
        if isinstance(r, Start) and r.time is not None
    }
    last: dict[tuple[str, object], tuple[int, float]] = {}
    for r in records:
        key = (r.job, getattr(r, "attempt_id", None))
        if isinstance(r, Checkpoint) and r.time is not None:
            last[key] = (r.step, r.time)
        elif isinstance(r, Notice) and r.step_at_notice is not None:
            last[key] = (r.step_at_notice, r.seen_at)
    steps = seconds = 0.0
    for key, (step, at) in last.items():
        if key in starts:
            begun, since = starts[key]
            if step > begun and at > since:
                steps += step - begun
                seconds += at - since
    return steps / seconds if seconds > 0 else None


def _restart_s(records: Sequence[Record]) -> float:
    started: dict[str, float] = {}
    for r in records:
        if isinstance(r, Start) and r.time is not None:
            started.setdefault(r.job, r.time)  # the job's first start
    # A twin is held until its `twin_from`: its restart counts from then.
    held = {r.twin: r.twin_from for r in records if isinstance(r, Placed) and r.twin}
    gaps = [
        started[r.successor] - max(r.submitted_at, held.get(r.successor) or 0.0)
        for r in records
        if isinstance(r, Successor) and r.successor in started
    ]
    # Slurm may start a held job up to a second before its `--begin` (it rounds): none.
    gaps = [max(0.0, g) for g in gaps]
    return sum(gaps) / len(gaps) if gaps else RESTART_S


def situation(
    goals: Goals,
    facts: Facts,
    *,
    now: float,
    doing: str,
    idle_preemptible: bool,
    waiting_s: float = 0.0,
) -> Situation:
    """The policy's question, from the spec's goals and the ledger's facts."""
    start = facts.first_submit if facts.first_submit is not None else now
    when = deadline.parse(goals.deadline, first_submit=start) if goals.deadline else None
    return Situation(
        now=now,
        on=facts.on,
        doing=doing,
        waiting_s=waiting_s,
        preemptions=facts.preemptions,
        start=start,
        deadline=when,
        steps_done=facts.steps_done,
        total_steps=goals.total_steps,
        rate=facts.rate,
        restart_s=facts.restart_s,
        idle_preemptible=idle_preemptible,
        fallback_after=_fallback_after(goals),
        max_wait_s=goals.max_wait_s,
        storm=facts.storm,
    )


def _fallback_after(goals: Goals) -> int | None:
    """Preemptions before standard nodes: ``fallback_after``, or ``max_preemptions`` for a
    run that may move (it moves rather than give up)."""
    found = [n for n in (goals.fallback_after, goals.max_preemptions) if n is not None]
    return min(found) if found and goals.may_move else goals.fallback_after


def node_seconds(records: Sequence[Record], now: float) -> dict[str, float]:
    """Node-seconds the run's attempts held, by the kind of node they trained on (an
    attempt without an end holds its nodes until ``now``, or the next one's start)."""
    on = PREEMPTIBLE
    held = {PREEMPTIBLE: 0.0, STANDARD: 0.0}
    starts = [r for r in records if isinstance(r, Start) and r.time is not None]
    ends = {(r.job, r.attempt_id): r.time for r in records if isinstance(r, End)}
    kinds = kinds_by_job(records)
    for i, start in enumerate(starts):
        until = ends.get((start.job, start.attempt_id))
        if until is None:
            until = starts[i + 1].time if i + 1 < len(starts) else now
        on = kinds.get(start.job, on)
        nodes = len(start.nodes) + len(start.spares or ())  # a spare costs as a training node
        held[on] += max(0.0, (until or now) - (start.time or now)) * nodes
    return held


def kinds_by_job(records: Sequence[Record]) -> dict[str, str]:
    """Each successor's kind, by its predecessor's decision (a twin: standard)."""
    first: dict[tuple[str, object], str] = {}
    for r in records:
        if isinstance(r, Successor):
            first.setdefault((r.job, r.attempt_id), r.successor)
    out: dict[str, str] = {}
    for r in records:
        if isinstance(r, Placed) and (r.job, r.attempt_id) in first:
            out[first[(r.job, r.attempt_id)]] = PREEMPTIBLE if r.twin else r.where
            if r.twin:
                out[r.twin] = STANDARD
    return out


def cost(
    records: Sequence[Record],
    now: float,
    *,
    gpus_per_node: int,
    price: float = defaults.ON_DEMAND_PRICE,
    discount: float = defaults.PREEMPTIBLE_DISCOUNT,
) -> float:
    """What the run has cost so far: each node-hour at its kind's price (``price`` per
    GPU-hour on demand, per node-hour for nodes without GPUs)."""
    held = node_seconds(records, now)
    per_node_s = price * max(gpus_per_node, 1) / 3600
    return per_node_s * (held[PREEMPTIBLE] * (1 - discount) + held[STANDARD])
