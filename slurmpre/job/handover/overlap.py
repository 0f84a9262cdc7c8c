"""Make before break in place: a spare's step starts while the drained one still trains.

An in-place restart ends the step, releases the drained node and only then starts the
next step, whose start-up (srun, the launcher, the script's imports and model, the
rendezvous) the training waits for: seconds on every preemption. When a hot spare
(``spare_nodes``) takes the drained node's place, the next step's nodes are all held
already, and the start-up can overlap the training instead, as a successor job's does:

1. the watcher (the step's node 0) asks every rank for its notice checkpoint, lets a
   script that can go on train on, and writes an *early* request (`Request.early`);
2. the batch script's supervisor starts the next step at once, beside this one
   (``srun --overlap`` on the kept nodes and the spare; ``SLURMPRE_RELEASING`` names
   the drained nodes, which that step's job no longer counts as its own);
3. the next step's script starts up and waits in `slurmpre.resume_path()`, which
   records that it waits (a `Waiting` record of the next in-place attempt);
4. the watcher then tells the training to take its last checkpoint and stop (or the
   deadline does); once that checkpoint has committed (its record says ``stopping``) the
   watcher asks for the in-place restart, the supervisor ends the step (the training's
   teardown is not waited for), releases the drained node and records it (`InPlace`);
5. the next step's node 0, which waited for that record (`wait_for_previous_step`),
   chooses the checkpoint just committed, and the training goes on from it.

Never two trainers on one folder: the next step chooses only after the step before
has ended. Only for a script that meets at `slurmpre.resume_path()` (it asked there
once), as for a successor; anything else restarts in place as before.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from slurmpre.errors import JobEnvironmentError
from slurmpre.folder import trust
from slurmpre.folder.layout import FolderLayout
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import AttemptId, InPlace, InPlaceFailed
from slurmpre.job.handover.inplace import Plan
from slurmpre.job.start.env import JobEnv

LOG = logging.getLogger(__name__)

POLL = 0.2  # seconds between looks at the ledger


def may_start_early(restart: Plan, job: JobEnv, folder: Path) -> bool:
    """The next step can start beside this one: it runs in place with a spare in a drained
    node's place (its nodes are all held), and the script meets at `resume_path()`."""
    if not restart.keep or not restart.spares_in or job.batch_host is None:
        return False
    return trust.marked(FolderLayout(folder).meets_at_resume(job.tag))


def previous_step(job: JobEnv) -> AttemptId:
    """The step a step started early follows: the same attempt's in-place restart before."""
    return AttemptId(job.restart_count, job.in_place - 1)


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
    if not job.releasing:
        return
    before = previous_step(job)
    deadline = clock() + timeout
    said = False
    while True:
        for record in ledger.records():
            if not isinstance(record, (InPlace, InPlaceFailed)):
                continue
            if record.job != job.tag or record.attempt_id != before:
                continue
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
