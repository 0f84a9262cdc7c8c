"""Cancelling a job, and saying whether a checkpoint was being written at that moment.

The job's rank 0 holds the folder's writing lock from a checkpoint's first byte to
its commit: holding it while ``scancel`` lands, no checkpoint can begin in between.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from slurmpre.errors import SlurmpreError, UsageError
from slurmpre.job.ledger import Ledger
from slurmpre.locks import LockTimeout
from slurmpre.login.jobs import Submitted, check_mine, slurm_job


def cancel(client: Any, entry: Submitted, *, after_checkpoint: bool, wait: float) -> str:
    """Cancel the job; what happened, in one line. With ``after_checkpoint``, wait up to
    ``wait`` seconds for a checkpoint being written to commit first (else refuse)."""
    if not wait >= 0:
        raise UsageError(f"--wait {wait:g}: give 0 seconds or more")
    info = slurm_job(client, entry.job)
    if info is None:
        raise SlurmpreError(f"Slurm knows no job {entry.job}: nothing to cancel")
    check_mine(info, entry.job)
    if info.finished:
        raise SlurmpreError(f"job {entry.job} has already ended ({info.state})")
    ledger = Ledger(Path(entry.checkpoint_dir))
    if not ledger.dir.is_dir():
        client.cancel(entry.job)
        return f"cancelled job {entry.job}"
    lock = ledger.writing_lock(wait if after_checkpoint else 0)
    try:
        lock.acquire()
    except LockTimeout:
        if after_checkpoint:
            raise SlurmpreError(
                f"a checkpoint was still being written after {wait:g} s: job {entry.job} "
                "not cancelled"
            ) from None
        client.cancel(entry.job)
        return (
            f"cancelled job {entry.job} while a checkpoint was being written: that checkpoint "
            "is lost, the one before it stays the newest complete"
        )
    try:
        client.cancel(entry.job)
    finally:
        lock.release()
    return f"cancelled job {entry.job}; no checkpoint was being written"
