"""A step started beside the step before it (`slurmpre.job.handover.overlap`): what it
counts as its job's, when it may choose a checkpoint, and what its training is told."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from slurmpre import environment
from slurmpre.errors import JobEnvironmentError
from slurmpre.folder.layout import FolderLayout
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import InPlace, InPlaceFailed
from slurmpre.job.handover.overlap import wait_for_previous_step
from slurmpre.job.start.env import read_job_env

from tests.job.conftest import Clock

ENV = {
    "SLURM_JOB_ID": "77",
    "SLURM_JOB_NODELIST": "gpu-preemptible-dp-[1-4]",
    "SLURM_STEP_NODELIST": "gpu-preemptible-dp-[1-2]",
    "SLURMD_NODENAME": "gpu-preemptible-dp-1",
    environment.BATCH_HOST: "gpu-preemptible-dp-1",
    environment.IN_PLACE: "1",
    environment.RELEASING: "gpu-preemptible-dp-3",
}


def test_the_node_being_released_is_not_the_jobs_any_more() -> None:
    """Slurm lists the drained node until the step before has ended; the step started
    early neither watches it nor counts it a spare."""
    job = read_job_env(ENV)
    assert job.releasing == ("gpu-preemptible-dp-3",)
    assert job.allocation == (
        "gpu-preemptible-dp-1",
        "gpu-preemptible-dp-2",
        "gpu-preemptible-dp-4",
    )
    assert job.spares == ("gpu-preemptible-dp-4",)
    plain = read_job_env({k: v for k, v in ENV.items() if k != environment.RELEASING})
    assert "gpu-preemptible-dp-3" in plain.allocation and plain.releasing == ()


def in_place(**fields: object) -> InPlace:
    base = dict(
        job="77",
        attempt=0,
        in_place=0,
        kept=("gpu-preemptible-dp-1", "gpu-preemptible-dp-2"),
        released=("gpu-preemptible-dp-3",),
        release_s=0.1,
        requested_at=1.0,
        released_at=2.0,
        why="test",
    )
    return InPlace(**{**base, **fields})  # type: ignore[arg-type]


def test_it_chooses_only_once_the_step_before_has_ended_and_its_node_is_released(
    tmp_path: Path, said: list[str]
) -> None:
    ledger = Ledger(tmp_path)
    ledger.ensure()
    clock = Clock()
    # Another attempt's and another job's releases are not this one's.
    ledger.append(in_place(in_place=1))
    ledger.append(in_place(job="78"))

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        if clock.now >= 5:
            ledger.append(in_place())  # the supervisor's record, 5 s on

    job = read_job_env(ENV)
    wait_for_previous_step(ledger, job, 60, clock=lambda: clock.now, sleep=sleep)
    assert 5 <= clock.now < 6
    assert said[0].startswith("started beside the step before")
    assert said[-1] == "the step before has ended, gpu-preemptible-dp-3 released"


def test_a_failed_release_or_a_step_that_never_ends_is_refused(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    ledger.ensure()
    clock = Clock()
    job = read_job_env(ENV)
    with pytest.raises(JobEnvironmentError, match="has not ended after 30 s"):
        wait_for_previous_step(ledger, job, 30, clock=lambda: clock.now, sleep=clock.sleep)
    ledger.append(InPlaceFailed(job="77", attempt=0, in_place=0, why="Job not running"))
    with pytest.raises(JobEnvironmentError, match="could not release gpu-preemptible-dp-3"):
        wait_for_previous_step(ledger, job, 30, clock=lambda: clock.now, sleep=clock.sleep)


def test_a_step_not_started_early_waits_for_nothing(tmp_path: Path, said: list[str]) -> None:
    job = dataclasses.replace(read_job_env(ENV), releasing=())
    wait_for_previous_step(Ledger(tmp_path), job, 0, sleep=pytest.fail)
    assert said == []


def test_the_training_of_a_step_started_early_waits_in_resume_path(tmp_path: Path) -> None:
    """Its script met at resume_path() before: told to wait there (RESUME_PENDING names
    this job), where the choice comes once the step before has ended."""
    from slurmpre.job.start.args import parse_args
    from slurmpre.job.start.launch import takes_over_early

    opts = parse_args([f"--checkpoint-dir={tmp_path}", "--", "python", "train.py"])
    job = read_job_env(ENV)
    layout = FolderLayout(tmp_path)
    layout.meta.mkdir()
    assert not takes_over_early(opts, job, tmp_path)  # its script never met there
    layout.meets_at_resume("77").touch()
    assert takes_over_early(opts, job, tmp_path)
    assert not takes_over_early(opts, dataclasses.replace(job, releasing=()), tmp_path)


def test_in_a_successor_job_a_step_started_early_waits_for_its_own_step_not_the_old_job(
    tmp_path: Path,
) -> None:
    """A successor keeps SLURMPRE_PREDECESSOR for good; its step started early still waits
    for this job's step before, whose watcher looks for that name in the Waiting record."""
    from slurmpre.job.start.launch import waits_for

    job = read_job_env({**ENV, environment.PREDECESSOR: "70"})
    assert waits_for(job) == "77"
    assert waits_for(dataclasses.replace(job, releasing=())) == "70"


def test_with_the_tier_it_resumes_from_the_save_its_nodes_pulled_before_the_step_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The step before had every node of this one pull its last save (its node 0 asked,
    under this step, and recorded the outcome under its own): this step resumes from that
    step; not from a pull that failed, nor the kept nodes' own pull, nor one older than
    the folder's newest."""
    from slurmpre.folder.checkpoints import writing
    from slurmpre.folder.records import PullAsked, PullDone
    from slurmpre.job.start.args import parse_args
    from slurmpre.job.start.resume import AttemptContext, wait_for_the_one_before
    from slurmpre.tier import handoff

    from tests.fakes import Jobs

    monkeypatch.setattr(handoff, "SERVE_WAIT", 0.1)  # no node serves: no gather
    opts = parse_args([f"--checkpoint-dir={tmp_path}", "--", "python", "train.py"])
    ledger = Ledger(tmp_path)
    ledger.ensure()
    ledger.append(in_place())  # the step before has ended
    env = {environment.LOCAL_DIR: str(tmp_path / "local")}
    at = AttemptContext(opts, read_job_env(ENV), tmp_path, ledger, Jobs({}), env)

    def pulled(step: int, ok: bool, *, under: int = 1) -> None:
        ledger.append(PullAsked(job="77", attempt=0, in_place=under, predecessor="77",
                                step=step, sources=("h:1",), pullers=(0,)))  # fmt: skip
        ledger.append(PullDone(job="77", attempt=0, predecessor="77", step=step, ok=ok))

    assert wait_for_the_one_before(at) is None  # nothing pulled
    pulled(12, ok=True, under=0)  # the kept nodes' pull in place: not this one's
    assert wait_for_the_one_before(at) is None
    pulled(14, ok=False)
    assert wait_for_the_one_before(at) is None
    pulled(16, ok=True)
    assert wait_for_the_one_before(at) == 16
    assert wait_for_the_one_before(dataclasses.replace(at, env={})) is None  # no tier here
    with writing(tmp_path, 18) as p:  # the folder holds a newer one
        (p / "w").write_text("18")
    assert wait_for_the_one_before(at) is None
