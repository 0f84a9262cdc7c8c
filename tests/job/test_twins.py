"""A hand-over that may not wait for ever: the successor's twin on standard nodes, held
by Slurm until the policy would stop waiting, and the claim that lets one of them train."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from slurmpre.errors import HandedOver
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import Claimed, Successor
from slurmpre.job.handover.placing import place, switch_at
from slurmpre.job.handover.twins import claim
from slurmpre.job.start.env import JobEnv
from slurmpre.placement.policy import PREEMPTIBLE, STANDARD, Goals, Situation, decide

from tests.fakes import FakeSlurm
from tests.job.test_placing import CLUSTER, T0, H, run_so_far


class Cancels(FakeSlurm):
    def __init__(self) -> None:
        self.cancelled: list[str] = []

    def cancel(self, job_id: str) -> None:
        self.cancelled.append(job_id)


def successor(job: str) -> JobEnv:
    return JobEnv(job, 0, 0, ("n1",), "n1", 0, predecessor="10")


def handed_over_to(folder: Path, *jobs: str) -> Ledger:
    ledger = Ledger(folder)
    ledger.ensure()
    for job in jobs:
        ledger.append(Successor(job="10", attempt=0, successor=job, excluded=(), why="x",
                                submitted_at=1.0))  # fmt: skip
    return ledger


def test_the_twin_starts_when_a_run_that_waits_would_fall_behind_the_line() -> None:
    """Ahead of the line now (100 steps of 1000 at hour 0.6 of 10), a waiting run with no
    preemptible node crosses it at hour 1: the twin is held until then."""
    asked = Situation(now=T0 + 0.6 * H, on=PREEMPTIBLE, doing="waiting", start=T0,
                      deadline=T0 + 10 * H, steps_done=100, total_steps=1000, rate=0.1,
                      restart_s=120)  # fmt: skip
    at = switch_at(asked)
    assert at is not None and T0 + 1 * H <= at <= T0 + 1 * H + 31
    assert decide(asked).where == PREEMPTIBLE
    assert switch_at(Situation(now=0.0, on=PREEMPTIBLE, doing="waiting")) is None  # no bound
    bounded = Situation(now=0.0, on=PREEMPTIBLE, doing="waiting", max_wait_s=900)
    assert switch_at(bounded) == pytest.approx(900, abs=30)


def test_a_successor_that_waits_on_preemptible_nodes_gets_a_held_twin() -> None:
    got = place(Goals(deadline="10h", total_steps=1000), run_so_far(100, 0.5), CLUSTER,
                ["gpu-preemptible-dp-1"], now=T0 + 0.6 * H, needed=1)  # fmt: skip
    assert got is not None and got.decision.where == PREEMPTIBLE and got.args == ()
    assert got.twin_at is not None and got.twin_at > T0 + 0.6 * H
    delay = round(got.twin_at - (T0 + 0.6 * H))
    assert got.twin_args == (
        "--constraint=", "--exclude=gpu-preemptible-dp-1,gpu-preemptible-dp-2",
        f"--begin=now+{delay}",
    )  # fmt: skip


def test_a_successor_sent_to_standard_nodes_has_no_twin() -> None:
    got = place(Goals(fallback_after=1), run_so_far(100, 0.5), CLUSTER, [], now=T0, needed=1)
    assert got is not None and got.decision.where == STANDARD and got.twin_at is None


def test_the_first_to_claim_trains_and_cancels_its_twin(tmp_path: Path) -> None:
    ledger = handed_over_to(tmp_path, "11", "12")
    slurm = Cancels()
    claim(ledger, slurm, successor("12"))
    assert slurm.cancelled == ["11"]
    assert [r.job for r in ledger.records() if isinstance(r, Claimed)] == ["12"]
    with pytest.raises(HandedOver, match="job 12 took over from job 10 first"):
        claim(ledger, slurm, successor("11"))
    assert slurm.cancelled == ["11"]  # the one that stood down cancelled nothing
    claim(ledger, slurm, successor("12"))  # requeued later: still its own


def test_a_successor_without_a_twin_claims_nothing(tmp_path: Path) -> None:
    ledger = handed_over_to(tmp_path, "11")
    claim(ledger, FakeSlurm(), successor("11"))  # no Slurm call at all
    assert not any(isinstance(r, Claimed) for r in ledger.records())


def test_two_twins_claiming_at_once_make_exactly_one_trainer(tmp_path: Path) -> None:
    ledger = handed_over_to(tmp_path, "11", "12")
    outcome: dict[str, str] = {}
    start = threading.Barrier(2)

    def go(job: str) -> None:
        start.wait()
        try:
            claim(Ledger(tmp_path), Cancels(), successor(job))
            outcome[job] = "trains"
        except HandedOver:
            outcome[job] = "stands down"
        except BaseException as exc:  # noqa: BLE001 - reaches pytest below
            outcome[job] = repr(exc)

    threads = [threading.Thread(target=go, args=(j,)) for j in ("11", "12")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(outcome.values()) == ["stands down", "trains"], outcome
    assert len([r for r in ledger.records() if isinstance(r, Claimed)]) == 1
