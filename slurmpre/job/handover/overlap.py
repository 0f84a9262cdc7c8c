"""Make before break in place: a spare's step starts while the drained one still trains.

The next step, started early beside this one (an early `Request`), chooses its
checkpoint only once the supervisor recorded that the step before has ended
(`wait_for_previous_step`): never two trainers on one folder. Only for a script that
meets at `slurmpre.resume_path()`. See docs/how-it-works.md ("Hot spares").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from slurmpre.errors import JobEnvironmentError
from slurmpre.folder import trust
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import AttemptId, InPlace, InPlaceFailed, Record
from slurmpre.job.handover.inplace import Plan
from slurmpre.job.start.env import JobEnv

LOG = logging.getLogger(__name__)

POLL = 0.2  # seconds between looks at the ledger


def may_start_early(restart: Plan, job: JobEnv, folder: Path) -> bool:
    """The next step can start beside this one: it runs in place with a spare in a drained
    node's place (its nodes are all held), and the script meets at `resume_path()`."""
    if not restart.keep or not restart.spares_in or job.batch_host is None:
        return False
    return trust.marked(job.files(folder).meets_at_resume)


def step_before(job: JobEnv) -> AttemptId | None:
    """The step a step started early was started beside (the same attempt's step before);
    None for any other step."""
    return AttemptId(job.restart_count, job.in_place).step_before if job.releasing else None


def step_before_ended(records: Sequence[Record], job: JobEnv) -> InPlace | InPlaceFailed | None:
    """How the supervisor recorded the end of the step ``job`` was started beside: its drained
    nodes released (`InPlace`), or not (`InPlaceFailed`); None while it has not ended."""
    before = step_before(job)
    for record in records:
        if isinstance(record, (InPlace, InPlaceFailed)) and record.job == job.tag \
                and record.attempt_id == before:  # fmt: skip
            return record
    return None


def wait_for_previous_step(
    ledger: Ledger,
    job: JobEnv,
    timeout: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """In a step started early, before choosing a checkpoint: wait until the supervisor
    recorded that the step before it has ended and its drained nodes are released. A
    JobEnvironmentError when the release failed (the job is requeued) or after
    ``timeout``: never choose while the step before may still write."""
    if step_before(job) is None:
        return
    deadline = clock() + timeout
    said = False
    while True:
        record = step_before_ended(ledger.records(), job)
        if isinstance(record, InPlace):
            LOG.info(f"the step before has ended, {', '.join(record.released)} released")
            return
        if isinstance(record, InPlaceFailed):
            raise JobEnvironmentError(
                f"the step before could not release {', '.join(job.releasing)}: "
                f"{record.why} (the job is requeued)"
            )
        if clock() >= deadline:
            raise JobEnvironmentError(
                f"the step before this one has not ended after {timeout:g} s: "
                "refusing to train beside it"
            )
        if not said:
            LOG.info("started beside the step before: waiting for its last checkpoint and its end")
            said = True
        sleep(POLL)
