"""The drill's schedule: seeded, and with every kind of moment once there are three."""

from __future__ import annotations

import random

import pytest
from slurmpre.drill.plan import KINDS, schedule


@pytest.mark.parametrize("count", [3, 4, 10])
def test_three_or_more_include_start_up_and_a_checkpoint(count: int) -> None:
    seed = random.SystemRandom().randrange(2**32)
    print(f"seed {seed}")
    moments = schedule(count, seed)
    kinds = [m.kind for m in moments]
    assert len(moments) == count
    assert "startup" in kinds and "checkpoint" in kinds
    assert set(kinds) <= set(KINDS)
    assert all(3 <= m.after <= 25 for m in moments if m.kind == "training")


def test_the_same_seed_gives_the_same_schedule_and_others_differ() -> None:
    assert schedule(10, 7) == schedule(10, 7)
    assert len({tuple(schedule(10, seed)) for seed in range(20)}) > 1


@pytest.mark.parametrize("count", [0, 1, 2])
def test_fewer_than_three_are_drawn_freely(count: int) -> None:
    assert len(schedule(count, 1)) == count
