"""The trace replay: the figures bench/deadline.py and `plan --deadline` print."""

from __future__ import annotations

import itertools
import random

import pytest
from slurmpre.placement.replay import Scene, capacity, replay, replay_all

H = 3600.0


def test_always_standard_finishes_after_one_start_and_costs_what_it_held() -> None:
    scene = Scene(work_s=2 * H, deadline_s=3 * H, up_s=H, down_s=H)
    out = replay(scene, "always-standard", [(0.0, 10 * H)])
    assert out.met and out.preemptions == 0 and out.moves == 0
    assert out.finished_s == pytest.approx(2 * H + 120, abs=30)
    assert out.cost == pytest.approx(out.held_s) and out.wasted_s == pytest.approx(120)


def test_a_run_with_no_capacity_at_all_moves_and_still_makes_its_deadline() -> None:
    scene = Scene(work_s=2 * H, deadline_s=3 * H, up_s=H, down_s=H)
    stuck = replay(scene, "always-preemptible", [(0.0, 100 * H)])
    assert not stuck.met
    moved = replay(scene, "fallback", [(0.0, 100 * H)])
    assert moved.met and moved.moves == 1


def test_capacity_that_never_leaves_costs_the_preemptible_price() -> None:
    scene = Scene(work_s=2 * H, deadline_s=3 * H, up_s=H, down_s=H)
    out = replay(scene, "fallback", [])
    assert out.met and out.moves == 0 and out.cost == pytest.approx(out.held_s * 0.5)


def test_the_fallback_policy_never_misses_what_always_standard_makes(rng: random.Random) -> None:
    for _ in range(20):
        share = rng.uniform(0.2, 0.95)
        down = rng.uniform(600, 4 * H)
        scene = Scene(
            work_s=rng.uniform(1, 6) * H,
            deadline_s=None,
            up_s=down * share / (1 - share),
            down_s=down,
        )
        scene = Scene(**{**scene.__dict__, "deadline_s": scene.work_s * rng.uniform(1.05, 2.5)})
        runs = replay_all(scene, 2, rng.randrange(2**32))
        for mine, std in zip(runs["fallback"], runs["always-standard"], strict=True):
            assert mine.met or not std.met, (scene, mine)


def test_a_trace_is_outages_in_order_within_the_horizon() -> None:
    scene = Scene(work_s=H, deadline_s=None, up_s=600, down_s=300)
    outs = capacity(scene, 10 * H, random.Random(3))
    assert outs and all(a < b for a, b in outs)
    assert all(b1 <= a2 for (_, b1), (a2, _) in itertools.pairwise(outs))
