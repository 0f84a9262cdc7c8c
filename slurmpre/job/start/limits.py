"""When a run stops restarting: a cap on its restarts, and a guard against a crash loop.

Every restart, whatever started it (the watcher's requeue, a successor, Slurm's requeue
after a node failure, an in-place restart), begins an attempt, and node 0 asks here
before it chooses a checkpoint. The run gives up when

- it has restarted more than ``max_restarts`` times (across its jobs), or
- its last ``max_stalled`` attempts committed no checkpoint: it cannot progress (a bad
  node image, a checkpoint that fails to load, a data error that shows only after a
  resume); restarting again would spend money on the same failure.

Giving up is recorded in the ledger (`GaveUp`, its reason on one line), the job is made
non-requeueable, and the attempt ends with exit 1, so Slurm does not start it again.
"""

from __future__ import annotations

from collections.abc import Sequence

from slurmpre.folder.records import AttemptId, AttemptRecord, Record, Start, Successor


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


def give_up_why(
    records: Sequence[Record],
    job: str,
    current: AttemptId,
    newest: int | None,
    run_restarts: int,
    max_restarts: int,
    max_stalled: int,
) -> str | None:
    """Why this attempt, about to resume from step ``newest``, must not train (one
    line), or None."""
    if run_restarts > max_restarts:
        return (
            f"restart {run_restarts} of the run is past max_restarts = {max_restarts}: "
            "not restarting again"
        )
    if max_stalled and (n := stalled(records, job, current, newest)) >= max_stalled:
        return (
            f"the last {n} attempts committed no checkpoint (max_stalled_restarts = "
            f"{max_stalled}): the job cannot progress; see their logs"
        )
    return None
