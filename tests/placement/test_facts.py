"""What a run's ledger says for a placement decision (`slurmpre.placement.facts`)."""

from __future__ import annotations

import pytest
from slurmpre.folder.records import (
    Checkpoint,
    Claimed,
    Notice,
    Placed,
    Start,
    Submitted,
    Successor,
)
from slurmpre.placement.facts import RESTART_S, read

T = 1_800_000_000.0


def drained(job: str, at: float, step: int) -> Notice:
    return Notice(job=job, attempt=0, kind="drain", node="n", reason="x", seen_at=at,
                  first=True, step_at_notice=step, time=at)  # fmt: skip


def test_a_fresh_ledger_says_little_and_guesses_nothing() -> None:
    facts = read([Submitted(job="1", name="a", time=T)])
    assert facts.first_submit == T and facts.steps_done == 0 and facts.rate is None
    assert facts.restart_s == RESTART_S and facts.preemptions == 0 and facts.on == "preemptible"


def test_rate_steps_and_preemptions_over_the_jobs_of_a_run() -> None:
    recs = [
        Submitted(job="1", name="a", time=T),
        Start(job="1", attempt=0, nodes=("n",), step=None, time=T + 10),
        Checkpoint(job="1", attempt=0, step=100, path="p", after_notice=False, time=T + 60),
        drained("1", T + 110, 200),
        Successor(job="1", attempt=0, successor="2", excluded=(), why="x", submitted_at=T + 110,
                  time=T + 110),
        Start(job="2", attempt=0, nodes=("m",), step=200, time=T + 114),
        Checkpoint(job="2", attempt=0, step=300, path="p", after_notice=False, time=T + 164),
    ]  # fmt: skip
    facts = read(recs)
    assert facts.steps_done == 300 and facts.preemptions == 1
    assert facts.rate == pytest.approx((200 + 100) / (100 + 50))
    assert facts.restart_s == pytest.approx(4)


def test_a_held_twin_restarts_from_its_hold_and_the_claim_says_where_the_run_is() -> None:
    recs = [
        Submitted(job="1", name="a", time=T),
        Successor(job="1", attempt=0, successor="2", excluded=(), why="x", submitted_at=T,
                  time=T),
        Successor(job="1", attempt=0, successor="3", excluded=(), why="twin", submitted_at=T,
                  time=T),
        Placed(job="1", attempt=0, where="preemptible", why="ahead", decided_at=T, twin="3",
               twin_from=T + 90, time=T),
    ]  # fmt: skip
    assert read(recs).on == "preemptible"  # neither has claimed: the successor's kind
    recs += [Claimed(job="3", attempt=0, predecessor="1", time=T + 91),
             Start(job="3", attempt=0, nodes=("s",), step=0, time=T + 93)]  # fmt: skip
    facts = read(recs)
    assert facts.on == "standard" and facts.restart_s == pytest.approx(3)


def test_a_twin_started_a_moment_before_its_hold_ends_restarted_at_once() -> None:
    """Slurm starts a held job as early as its --begin second allows: a start just before
    the hold's end is a restart of 0 s, not a restart the ledger knows nothing of."""
    recs = [
        Successor(job="1", attempt=0, successor="3", excluded=(), why="twin", submitted_at=T,
                  time=T),
        Placed(job="1", attempt=0, where="preemptible", why="ahead", decided_at=T, twin="3",
               twin_from=T + 30.4, time=T),
        Start(job="3", attempt=0, nodes=("s",), step=0, time=T + 29.9),
    ]  # fmt: skip
    assert read(recs).restart_s == 0.0
