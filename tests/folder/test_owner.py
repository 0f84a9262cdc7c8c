"""Which other jobs still hold a checkpoint folder: the ledger's jobs, judged by Slurm."""

from __future__ import annotations

from pathlib import Path

import pytest
from slurmpre.errors import JobNotFound, SlurmError
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.owner import live_holders, recorded_jobs
from slurmpre.lines import sent_to
from slurmpre.slurm.parse import parse_jobs

from tests.conftest import DATA
from tests.fakes import Jobs
from tests.records import record

RUNNING = parse_jobs((DATA / "slurm-22.05" / "job-running-elastic.txt").read_text())[0]
DONE = parse_jobs((DATA / "slurm-22.05" / "job-cancelled.txt").read_text())[0]


def ledger(tmp_path: Path, *jobs: str) -> Ledger:
    led = Ledger(tmp_path)
    led.ensure()
    for job in jobs:
        led.append(record({"event": "submitted", "job": job}))
    led.append(record({"event": "start", "job": jobs[0], "attempt": 0}))
    return led


def test_only_live_jobs_other_than_this_one_hold_the_folder(tmp_path: Path) -> None:
    led = ledger(tmp_path, "10", "11", "12", "13")
    jobs = Jobs({"11": RUNNING, "12": DONE, "13": RUNNING})
    holders = live_holders(led, jobs, besides="13")
    assert [h.job for h in holders] == ["11"]  # 10: purged by Slurm; 12: finished
    assert recorded_jobs(led) == ["11", "12", "13", "10"]
    assert "13" not in jobs.asked


def test_when_slurm_does_not_answer_nothing_blocks_and_it_says_so(tmp_path: Path) -> None:
    said: list[str] = []
    with sent_to(said.append, live_holders.__module__):
        holders = live_holders(ledger(tmp_path, "10"), Jobs({}, down=True))
    assert holders == []
    assert said == [
        "cannot tell whether job 10 still runs (command failed (exit 1): scontrol show job)"
    ]


@pytest.mark.parametrize("release", ["22.05", "24.11", "26.05"])
def test_the_client_says_a_job_is_gone_in_one_way(release: str) -> None:
    """scontrol's words for an unknown job (captured on each release) become JobNotFound,
    read in one place; any other failure stays a SlurmError."""
    from slurmpre.errors import CommandError
    from slurmpre.slurm.client import CommandLineSlurm

    said = (DATA / f"slurm-{release}" / "job-unknown.txt").read_text()

    class Failing(CommandLineSlurm):
        def __init__(self, stderr: str) -> None:
            super().__init__()
            self.stderr = stderr

        def _run(self, argv: object, *, input: str | None = None) -> str:
            raise SlurmError(f"command failed (exit 1): scontrol show job\n    {self.stderr}")

    with pytest.raises(JobNotFound, match="Slurm knows no job 42"):
        Failing(said).job("42")
    with pytest.raises(SlurmError) as info:
        Failing("Unable to contact slurm controller").job("42")
    assert not isinstance(info.value, JobNotFound) and isinstance(info.value, CommandError)


def test_a_successor_still_pending_holds_the_folder(tmp_path: Path) -> None:
    """Job 10 handed over to job 11, which waits for a node: a second submission, or
    `--fresh`, must see 11 as the folder's live job (it was seen only once it started)."""
    led = ledger(tmp_path, "10")
    led.append(record({"event": "successor", "job": "10", "attempt": 0, "successor": "11",
                       "excluded": [], "why": "notice", "submitted_at": 1.0}))  # fmt: skip
    pending = parse_jobs((DATA / "slurm-22.05" / "job-pending-requeued.txt").read_text())[0]
    assert recorded_jobs(led) == ["10", "11"]
    assert [h.job for h in live_holders(led, Jobs({"11": pending}))] == ["11"]
