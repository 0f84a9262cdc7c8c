"""A hand-over that may not wait for ever: a successor on preemptible nodes, and its twin
on standard nodes that Slurm holds until the moment the placement policy would give up
waiting (``sbatch --begin``). No process has to watch the queue: whichever of the two
starts first claims the hand-over (`claim`, under the ledger's lock) and cancels the
other; one that starts second, or finds the other's claim, stands down without training.
One trainer per checkpoint folder, as with one successor.
"""

from __future__ import annotations

import logging

from slurmpre.errors import HandedOver, SlurmpreError
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import Claimed, Record, Successor
from slurmpre.job.start.env import JobEnv
from slurmpre.slurm.client import SlurmClient

LOG = logging.getLogger(__name__)


def siblings(records: list[Record], job: JobEnv) -> list[str]:
    """The other jobs ``job``'s predecessor submitted for the same hand-over."""
    return [
        r.successor
        for r in records
        if isinstance(r, Successor) and r.job == job.predecessor and r.successor != job.tag
    ]


def claim(ledger: Ledger, client: SlurmClient, job: JobEnv) -> None:
    """In a successor's node 0, before it waits for its predecessor: take the hand-over
    from its twin (cancelled), or stand down (`HandedOver`, exit 0) when the twin took it."""
    if not job.predecessor:
        return
    others = siblings(ledger.records(), job)
    if not others:
        return
    mine = Claimed(job=job.tag, attempt=job.restart_count, predecessor=job.predecessor)
    found = ledger.append_unless(
        mine,
        lambda r: isinstance(r, Claimed) and r.predecessor == job.predecessor,
    )
    if found is not None and found.job != job.tag:
        raise HandedOver(
            f"job {found.job} took over from job {job.predecessor} first: this job, its "
            "twin, stands down without training"
        )
    for other in others:
        try:
            client.cancel(other)
        except SlurmpreError as exc:
            LOG.info(f"cannot cancel job {other}, the other job of this hand-over: {exc}")
            continue
        LOG.info(f"took over from job {job.predecessor}; cancelled job {other}, its twin")
