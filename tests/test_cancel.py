"""`slurmpre cancel`: the whole run (a pending successor included), and whether a
checkpoint was being written; Slurm is a scripted stand-in here."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from slurmpre.errors import SlurmpreError
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import Successor
from slurmpre.login.cancel import cancel
from slurmpre.login.jobs import Submitted
from slurmpre.slurm.parse import JobInfo, parse_jobs

from tests.conftest import DATA
from tests.fakes import Jobs

RUNNING = parse_jobs((DATA / "slurm-22.05" / "job-running-elastic.txt").read_text())[0]
PENDING = parse_jobs((DATA / "slurm-22.05" / "job-pending-requeued.txt").read_text())[0]
DONE = parse_jobs((DATA / "slurm-22.05" / "job-cancelled.txt").read_text())[0]


class Cancelling(Jobs):
    """Cancelled jobs end; ``on_cancel`` runs as the cancel lands (a watcher's hand-over)."""

    def __init__(self, known: dict[str, JobInfo], on_cancel=None) -> None:  # type: ignore[no-untyped-def]
        super().__init__(known)
        self.cancelled: list[str] = []
        self.on_cancel = on_cancel

    def cancel(self, job_id: str) -> None:
        self.cancelled.append(job_id)
        self.known[job_id] = DONE
        if self.on_cancel is not None:
            self.on_cancel(job_id)


def entry(folder: Path, job: str = "10") -> Submitted:
    return Submitted(job, "run", str(folder), str(folder / "logs"), time.time())


def hand_over(folder: Path, job: str, to: str) -> None:
    Ledger(folder).append(
        Successor(job=job, attempt=0, successor=to, excluded=("n1",), why="x", submitted_at=1.0)
    )


def test_a_job_without_a_ledger_is_cancelled(tmp_path: Path) -> None:
    slurm = Cancelling({"10": RUNNING})
    said = cancel(slurm, entry(tmp_path), after_checkpoint=False, wait=0, sleep=lambda _: None)
    assert slurm.cancelled == ["10"] and said == "cancelled job 10"


def test_the_pending_successor_of_a_run_is_cancelled_too(tmp_path: Path) -> None:
    Ledger(tmp_path).ensure()
    hand_over(tmp_path, "10", "11")
    slurm = Cancelling({"10": RUNNING, "11": PENDING})
    said = cancel(slurm, entry(tmp_path), after_checkpoint=False, wait=0, sleep=lambda _: None)
    assert slurm.cancelled == ["10", "11"]
    assert said == "cancelled jobs 10, 11; no checkpoint was being written"


def test_a_hand_over_that_crosses_the_cancel_is_cancelled_as_well(tmp_path: Path) -> None:
    """The watcher submitted its successor just as the cancel reached the job."""
    Ledger(tmp_path).ensure()
    slurm = Cancelling({"10": RUNNING})

    def handed(job: str) -> None:
        if job == "10":
            hand_over(tmp_path, "10", "11")
            slurm.known["11"] = PENDING

    slurm.on_cancel = handed
    cancel(slurm, entry(tmp_path), after_checkpoint=False, wait=0, sleep=lambda _: None)
    assert slurm.cancelled == ["10", "11"]


def test_a_run_that_ended_is_not_cancelled_again(tmp_path: Path) -> None:
    Ledger(tmp_path).ensure()
    hand_over(tmp_path, "10", "11")
    slurm = Cancelling({"10": DONE, "11": DONE})
    with pytest.raises(SlurmpreError, match="job 11 has already ended"):
        cancel(slurm, entry(tmp_path), after_checkpoint=False, wait=0, sleep=lambda _: None)
    assert slurm.cancelled == []


def test_a_checkpoint_being_written_is_said_or_waited_for(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    ledger.ensure()
    with ledger.writing_lock(0):
        with pytest.raises(SlurmpreError, match=r"still being written after 0\.1 s"):
            cancel(Cancelling({"10": RUNNING}), entry(tmp_path), after_checkpoint=True,
                   wait=0.1, sleep=lambda _: None)  # fmt: skip
        slurm = Cancelling({"10": RUNNING})
        said = cancel(slurm, entry(tmp_path), after_checkpoint=False, wait=0,
                      sleep=lambda _: None)  # fmt: skip
    assert slurm.cancelled == ["10"] and "that checkpoint is lost" in said
