"""The drill's schedule: seeded, and with every kind of moment once there are three."""

from __future__ import annotations

import pytest
from slurmpre.drill.plan import KINDS, schedule


@pytest.mark.parametrize("count", [3, 4, 10])
def test_three_or_more_include_start_up_and_a_checkpoint(count: int, seed: int) -> None:
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


@pytest.mark.parametrize("baseline", [False, True])
@pytest.mark.parametrize("window", [5.0, 10.0, 15.0, 60.0])
def test_the_run_is_long_enough_for_every_preemption_of_either_recipe(
    baseline: bool, window: float, seed: int
) -> None:
    """Replays the worst a schedule can do: each attempt's moment as late as it can come,
    the seeds' recipe training through the window and keeping only its last periodic save.
    Every drain must come while the run still trains."""
    from slurmpre.drill.options import DrillOptions

    for count in range(0, 12):
        opts = DrillOptions(preemptions=count, window=window, baseline=baseline, seed=seed)
        steps, every = opts.training_steps(), opts.every
        through = round(window / opts.step_seconds) if baseline else 0
        for moments in [schedule(count, seed + i) for i in range(50)]:
            start = 0  # where the attempt resumed
            for moment in moments:
                if moment.kind == "startup":
                    drain = start
                elif moment.kind == "training":
                    drain = start + moment.after
                else:  # the attempt's first periodic save
                    drain = (start // every + 1) * every
                assert drain < steps, (count, moments, steps)
                # slurmpre resumes at the drain; the seeds' recipe at its last save
                start = (drain + through) // every * every if baseline else drain
