"""Preemptible or standard: every rule of `placement.policy.decide`, one fact at a time."""

from __future__ import annotations

from dataclasses import replace

import pytest
from slurmpre.placement.policy import (
    PREEMPTIBLE,
    STANDARD,
    TRAINING,
    WAITING,
    Situation,
    decide,
    line,
    slack,
)

H = 3600.0
# A 10-hour run (one step a second) with a deadline 20 hours after its start, at hour 5.
BASE = Situation(
    now=5 * H, on=PREEMPTIBLE, doing=TRAINING, start=0.0, deadline=20 * H,
    steps_done=int(4 * H), total_steps=int(10 * H), rate=1.0, restart_s=120.0,
)  # fmt: skip


def test_the_line_and_the_slack_are_what_the_deadline_and_the_rate_say() -> None:
    assert line(BASE) == pytest.approx(10 * H * 5 / 20)
    assert slack(BASE) == pytest.approx(20 * H - 5 * H - 6 * H - 120)
    assert slack(replace(BASE, rate=None)) is None and line(replace(BASE, deadline=None)) is None


def test_training_on_preemptible_nodes_goes_on_while_the_slack_survives_a_preemption() -> None:
    assert decide(BASE).where == PREEMPTIBLE
    assert decide(replace(BASE, steps_done=0)).where == PREEMPTIBLE  # behind, but training


def test_training_on_preemptible_moves_when_one_more_preemption_would_miss_the_deadline() -> None:
    tight = replace(BASE, now=20 * H - 6 * H - 200)  # slack 80 s < one restart
    d = decide(tight)
    assert d.where == STANDARD and "one more preemption" in d.why


def test_waiting_for_preemptible_nodes_moves_once_behind_the_line() -> None:
    waiting = replace(BASE, doing=WAITING, waiting_s=600)
    assert decide(replace(waiting, steps_done=int(2.6 * H))).where == PREEMPTIBLE  # ahead
    idle = replace(waiting, steps_done=0, idle_preemptible=True)
    assert decide(idle).where == PREEMPTIBLE  # behind, but nodes are there: no wait
    behind = decide(replace(waiting, steps_done=int(2.4 * H)))
    assert behind.where == STANDARD and "behind the line" in behind.why


def test_standard_nodes_go_back_to_preemptible_only_when_idle_ahead_and_with_slack() -> None:
    on_std = replace(BASE, on=STANDARD, steps_done=int(3 * H), idle_preemptible=True)
    assert decide(on_std).where == PREEMPTIBLE
    assert decide(replace(on_std, idle_preemptible=False)).where == STANDARD
    assert decide(replace(on_std, steps_done=int(2.5 * H) + 60)).where == STANDARD  # near it
    late = replace(on_std, now=20 * H - 6 * H - 400, steps_done=int(4 * H))
    assert decide(late).where == STANDARD  # the slack pays for no move and a preemption


def test_fallback_after_n_preemptions_moves_and_stays_without_a_deadline() -> None:
    plain = Situation(now=100.0, on=PREEMPTIBLE, doing=WAITING, fallback_after=3)
    assert decide(replace(plain, preemptions=2)).where == PREEMPTIBLE
    d = decide(replace(plain, preemptions=3))
    assert d.where == STANDARD and "fallback_after = 3" in d.why
    stays = replace(plain, on=STANDARD, doing=TRAINING, preemptions=3, idle_preemptible=True)
    assert decide(stays).where == STANDARD


def test_a_wait_longer_than_max_wait_moves_a_waiting_run_only() -> None:
    plain = Situation(now=100.0, on=PREEMPTIBLE, doing=WAITING, max_wait_s=900)
    assert decide(replace(plain, waiting_s=899)).where == PREEMPTIBLE
    assert decide(replace(plain, waiting_s=900)).where == STANDARD
    assert decide(replace(plain, doing=TRAINING, waiting_s=5000)).where == PREEMPTIBLE


def test_without_a_deadline_or_a_budget_the_run_stays_where_it_asked() -> None:
    plain = Situation(now=100.0, on=PREEMPTIBLE, doing=WAITING, waiting_s=10**6, preemptions=50)
    assert decide(plain).where == PREEMPTIBLE
