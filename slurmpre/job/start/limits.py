"""When a run stops restarting: its budgets (``max_restarts``, ``max_preemptions``,
``max_stalled_restarts``, ``max_cost``: docs/deadlines.md, "Budgets that tell causes
apart"), asked by node 0 before it chooses a checkpoint, whatever started the attempt.
Giving up is recorded (`GaveUp`), the job made non-requeueable, and the attempt ends
with exit 1, so Slurm does not start it again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from slurmpre import defaults
from slurmpre.folder.records import (
    AttemptId,
    AttemptRecord,
    End,
    Notice,
    Record,
    Start,
    Successor,
)


@dataclass(frozen=True)
class Limits:
    """The spec's restart budgets (`slurmpre.keys`, part "limits"), as the wrapper read them."""

    max_restarts: int = defaults.MAX_RESTARTS
    max_stalled_restarts: int = defaults.MAX_STALLED_RESTARTS


def run_jobs(records: Sequence[Record], job: str) -> list[str]:
    """The jobs of ``job``'s run up to it, first to last (each took over from the one
    before it)."""
    before = {r.successor: r.job for r in records if isinstance(r, Successor)}
    jobs = [job]
    while jobs[0] in before and before[jobs[0]] not in jobs:
        jobs.insert(0, before[jobs[0]])
    return jobs


def stalled(records: Sequence[Record], job: str, current: AttemptId, newest: int | None) -> int:
    """How many attempts in a row, right before ``current``, committed no checkpoint.

    Judged by the folder, whoever wrote to it (slurmpre's commit, a framework's own
    save, a script's own files): an attempt that started from the checkpoint that is
    still the newest (step ``newest``; None: none) added none, and neither did one that
    never chose where to start."""
    jobs = run_jobs(records, job)
    order = {j: i for i, j in enumerate(jobs)}
    mine = [r for r in records if isinstance(r, AttemptRecord) and r.job in order]
    attempts = sorted(
        {(r.job, r.attempt_id) for r in mine if (r.job, r.attempt_id) != (job, current)},
        key=lambda a: (order[a[0]], a[1].restart, a[1].in_place),
    )
    started = {(r.job, r.attempt_id): r.step for r in mine if isinstance(r, Start)}
    count = 0
    for attempt in reversed(attempts):
        if attempt in started and started[attempt] != newest:
            break  # it started from an older checkpoint: one was committed since
        count += 1
    return count


@dataclass(frozen=True)
class Causes:
    """Why the run's earlier attempts ended, each counted once."""

    preemptions: int = 0  # a drain seen, or the attempt killed with its node (no end)
    failures: int = 0  # the training exited with an error, no notice before it
    other: int = 0  # the time limit, or a clean end that was restarted anyway


def causes(records: Sequence[Record], job: str, current: AttemptId) -> Causes:
    """How each attempt of ``job``'s run before ``current`` ended (in-place restarts
    are not restarts of the run). A drain notice is a preemption; an attempt that left no
    `End` was killed with its node, which on this provider is a preemption too (the
    training's own crash ends with an exit code, which the wrapper records)."""
    jobs = set(run_jobs(records, job))
    ended: dict[tuple[str, int], int | None] = {}
    noticed: dict[tuple[str, int], str] = {}
    begun: set[tuple[str, int]] = set()
    for r in records:
        if not isinstance(r, AttemptRecord) or r.job not in jobs:
            continue
        key = (r.job, r.attempt)
        if (r.job, r.attempt_id) == (job, current) or (
            r.job == job and r.attempt >= current.restart
        ):
            continue
        if isinstance(r, Start):
            begun.add(key)
        elif isinstance(r, Notice):
            noticed.setdefault(key, r.kind)
        elif isinstance(r, End):
            ended[key] = r.exit_code
    pre = fail = other = 0
    for key in begun | set(noticed) | set(ended):
        if noticed.get(key) == "drain" or (key not in ended and key not in noticed):
            pre += 1
        elif key not in noticed and ended.get(key) not in (0, None):
            fail += 1
        else:
            other += 1
    return Causes(pre, fail, other)


def give_up_why(
    records: Sequence[Record],
    job: str,
    current: AttemptId,
    newest: int | None,
    run_restarts: int,
    limits: Limits,
    max_preemptions: int | None = None,
) -> str | None:
    """Why this attempt, about to resume from step ``newest``, must not train (one
    line), or None. ``run_restarts`` is how many restarts came before it, whatever
    their cause (when the ledger holds none of them, they count as failures)."""
    if run_restarts:
        found = causes(records, job, current)
        counted = found.preemptions + found.failures + found.other
        failures = found.failures + max(0, run_restarts - counted)
        if failures > limits.max_restarts:
            return (
                f"{failures} restarts of the run after a failure is past max_restarts = "
                f"{limits.max_restarts} (preemptions are counted apart): not restarting again"
            )
        if max_preemptions is not None and found.preemptions > max_preemptions:
            return (
                f"{found.preemptions} preemptions of the run is past max_preemptions = "
                f"{max_preemptions}: not restarting again"
            )
    most = limits.max_stalled_restarts
    if most and (n := stalled(records, job, current, newest)) >= most:
        return (
            f"the last {n} attempts committed no checkpoint (max_stalled_restarts = "
            f"{most}): the job cannot progress; see their logs"
        )
    return None


def over_budget(
    records: Sequence[Record], now: float, max_cost: float | None, gpus: int
) -> str | None:
    """Why the run may not start another attempt: its cost so far reached ``max_cost``."""
    if max_cost is None:
        return None
    from slurmpre.placement.facts import cost  # here: only a run with a budget needs it

    spent = cost(records, now, gpus_per_node=gpus)
    if spent < max_cost:
        return None
    return f"the run has cost {spent:.2f} (its node-hours at their prices), max_cost = {max_cost:g}"
