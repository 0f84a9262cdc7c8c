"""Cancelling a job, and saying whether a checkpoint was being written at that moment.

The job's rank 0 holds the folder's writing lock from a checkpoint's first byte to
its commit: holding it while ``scancel`` lands, no checkpoint can begin in between.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from slurmpre.errors import SlurmpreError, UsageError
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.locks import LockTimeout
from slurmpre.login import progress
from slurmpre.login.jobs import Submitted, check_mine, slurm_job
from slurmpre.login.status import chain
from slurmpre.slurm.client import SlurmClient


def _live(client: SlurmClient, jobs: list[str]) -> list[str]:
    return [j for j in jobs if (info := slurm_job(client, j)) is not None and not info.finished]


def _cancel_run(
    client: SlurmClient, ledger: Ledger | None, first: str, *, settle: float, sleep: Any
) -> list[str]:
    """Cancel every live job of the run ``first`` began (it, and the successors that took
    over from it, a pending one included); then look again, since a watcher may have
    handed over while the cancel travelled, and cancel what appeared. The jobs cancelled."""
    done: list[str] = []
    for _ in range(5):
        run = chain(ledger.records(), first) if ledger is not None else [first]
        targets = [j for j in _live(client, run) if j not in done]
        for job in targets:
            client.cancel(job)
        done += targets
        if ledger is None or (len(run) == 1 and not targets):
            break
        sleep(settle)
        if chain(ledger.records(), first) == run:
            break
    return done


def cancel(
    client: SlurmClient,
    entry: Submitted,
    *,
    after_checkpoint: bool,
    wait: float,
    settle: float = 2.0,
    sleep: Any = time.sleep,
) -> str:
    """Cancel the run (the job and any successor that took over from it); what happened,
    in one line. With ``after_checkpoint``, wait up to ``wait`` seconds for a checkpoint
    being written to commit first (else refuse)."""
    if not wait >= 0:
        raise UsageError(f"--wait {wait:g}: give 0 seconds or more")
    found = Ledger(Path(entry.checkpoint_dir), view=True)
    ledger = found if found.dir.is_dir() else None
    run = chain(ledger.records(), entry.job) if ledger is not None else [entry.job]
    info = slurm_job(client, run[-1])
    if info is None and slurm_job(client, entry.job) is None:
        raise SlurmpreError(f"Slurm knows no job {entry.job}: nothing to cancel")
    check_mine(info, run[-1])
    if not _live(client, run):
        state = f" ({info.state})" if info is not None else ""
        raise SlurmpreError(f"job {run[-1]} has already ended{state}")

    def said(done: list[str]) -> str:
        return f"job {done[0]}" if len(done) == 1 else f"jobs {', '.join(done)}"

    if ledger is None:
        return f"cancelled {said(_cancel_run(client, None, entry.job, settle=settle, sleep=sleep))}"
    lock = ledger.writing_lock(wait if after_checkpoint else 0)
    try:
        progress.acquire(lock, f"waiting for the checkpoint job {run[-1]} is writing")
    except LockTimeout:
        if after_checkpoint:
            raise SlurmpreError(
                f"a checkpoint was still being written after {wait:g} s: job {run[-1]} "
                "not cancelled"
            ) from None
        done = _cancel_run(client, ledger, entry.job, settle=settle, sleep=sleep)
        return (
            f"cancelled {said(done)} while a checkpoint was being written: that checkpoint "
            "is lost, the one before it stays the newest complete"
        )
    try:
        # Holding the writing lock, no checkpoint can begin before the cancel lands.
        done = _cancel_run(client, ledger, entry.job, settle=settle, sleep=sleep)
    finally:
        lock.release()
    return f"cancelled {said(done)}; no checkpoint was being written"


def cancel_tasks(
    client: SlurmClient,
    entry: Submitted,
    *,
    after_checkpoint: bool,
    wait: float,
    settle: float = 2.0,
    sleep: Any = time.sleep,
) -> str:
    """Cancel every task of an array job still running or pending (each with its run:
    a successor that took over from a task too), task by task, each holding its own
    folder's writing lock as `cancel` does (which checks ``wait``); one line per task."""
    said: list[str] = []
    cancelled = 0
    for task in entry.tasks():
        try:
            line = cancel(
                client, task, after_checkpoint=after_checkpoint, wait=wait,
                settle=settle, sleep=sleep,
            )  # fmt: skip
            cancelled += 1
        except SlurmpreError as exc:
            if isinstance(exc, UsageError):
                raise
            line = str(exc)
        said.append(f"{task.job}: {line}")
    if not cancelled:
        raise SlurmpreError(f"array job {entry.job}: no task left to cancel; " + "; ".join(said))
    return "\n".join(said)
