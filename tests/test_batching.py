"""The global batch across world sizes, and every sample once per epoch whatever the
sequence of world sizes (`slurmpre.api.batching`)."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from slurmpre.api.batching import ElasticSampler, batching
from slurmpre.errors import UsageError


@pytest.mark.parametrize(
    ("world", "accumulation"), [(1, 12), (2, 6), (3, 4), (4, 3), (6, 2), (12, 1)]
)
def test_the_accumulation_keeps_the_global_batch(world: int, accumulation: int) -> None:
    b = batching(48, 4, world)
    assert b.accumulation == accumulation
    assert b.accumulation * b.micro_batch * b.world_size == 48


def test_a_global_batch_that_cannot_be_met_says_what_to_change() -> None:
    with pytest.raises(UsageError, match=r"global_batch=50 cannot be split over 4 ranks.*48 or 52"):
        batching(50, 2, 4)
    with pytest.raises(UsageError, match=r"12 samples per rank, not a multiple of micro_batch=5: "
                                         r"use micro_batch=6"):  # fmt: skip
        batching(48, 5, 4)
    for bad in ({"global_batch": 0}, {"micro_batch": "8"}, {"world_size": 2.0}):
        with pytest.raises(UsageError, match=next(iter(bad))):
            batching(**{"global_batch": 48, "micro_batch": 4, "world_size": 2, **bad})


def one_step(size: int, consumed: int, world: int, gb: int = 24, mb: int = 2, seed: int = 5):
    """Every rank's micro batches of one optimizer step, as each rank's sampler gives them."""
    out = []
    for r in range(world):
        s = ElasticSampler(size, gb, mb, seed=seed, consumed=consumed, rank=r, world_size=world)
        out.append(next(iter_steps(s)))
    return out


def iter_steps(s: ElasticSampler):
    it = iter(s)
    while True:
        yield [next(it) for _ in range(s.batching.accumulation)]


def test_every_sample_once_per_epoch_across_any_sequence_of_world_sizes(
    rng: random.Random,
) -> None:
    size, gb = 600, 24
    seen: list[int] = []
    consumed = 0
    worlds = [2, 4, 3, 4]  # the sequence, then more at random
    while consumed < 3 * size:
        world = worlds.pop(0) if worlds else rng.choice([1, 2, 3, 4, 6])
        for _ in range(rng.randint(1, 9)):
            step = one_step(size, consumed, world)
            assert all(len(mb) == 2 for rank in step for mb in rank)
            seen += [i for rank in step for mb in rank for i in mb]
            consumed += gb
    for epoch in range(3):
        counts = Counter(seen[epoch * size : (epoch + 1) * size])
        assert counts == Counter(range(size)), f"epoch {epoch}"


def test_the_same_global_step_holds_the_same_samples_on_any_world_size() -> None:
    for consumed in (0, 24 * 7, 24 * 30):
        sets = {
            world: sorted(i for rank in one_step(100, consumed, world) for mb in rank for i in mb)
            for world in (1, 2, 3, 4)
        }
        assert len({tuple(v) for v in sets.values()}) == 1


def test_iterating_gives_the_steps_that_start_in_this_epoch() -> None:
    s = ElasticSampler(100, 24, 4, rank=0, world_size=2, consumed=48)
    batches = list(s)
    assert len(batches) == len(s) == 3 * 3  # steps at 48, 72, 96: 3 micro batches each
    s.advance(3)
    assert s.consumed == 120 and s.epoch == 1


def test_the_state_is_where_the_run_is_and_a_changed_order_is_refused() -> None:
    a = ElasticSampler(100, 24, 4, seed=3, rank=1, world_size=3)
    a.advance(5)
    b = ElasticSampler(100, 24, 2, seed=3, rank=0, world_size=4)
    b.load_state_dict(a.state_dict())
    assert b.consumed == 120
    with pytest.raises(UsageError, match="seed=3, this one 4"):
        ElasticSampler(100, 24, 4, seed=4, rank=0, world_size=1).load_state_dict(a.state_dict())
    with pytest.raises(UsageError, match="rank=3: must be from 0"):
        ElasticSampler(100, 24, 4, rank=3, world_size=3)


def test_the_samplers_state_is_kept_in_the_checkpoint_and_resumed_on_another_world(
    tmp_path, monkeypatch
) -> None:
    """`slurmpre.checkpoint(step, sampler=s)` keeps where the data order is in the commit;
    the next attempt, on another world size, goes on from the same stream position."""
    import slurmpre
    from slurmpre.errors import CheckpointError
    from slurmpre.folder import checkpoints

    from tests.conftest import as_a_job

    as_a_job(monkeypatch, tmp_path, "7")
    before = ElasticSampler(100, 24, 4, seed=3, rank=0, world_size=2)
    before.advance(5)
    with slurmpre.checkpoint(5, sampler=before) as path:
        (path / "w").write_text("5")
    committed = checkpoints.latest(tmp_path).checkpoint
    assert committed is not None and (committed.path / "sampler.json").is_file()
    after = ElasticSampler(100, 24, 2, seed=3, rank=2, world_size=3)
    assert after.resume(committed.path) and after.consumed == 120
    assert not ElasticSampler(100, 24, 4, seed=3, rank=0, world_size=1).resume(None)
    other = ElasticSampler(100, 24, 4, seed=4, rank=0, world_size=1)
    with pytest.raises(UsageError, match="seed=3"):
        other.resume(committed.path)  # another order: refused, never silently changed
    (committed.path / "sampler.json").write_text("[1]")
    with pytest.raises(CheckpointError, match="holds no sampler state"):
        after.resume(committed.path)
    with (
        pytest.raises(UsageError, match="sampler="),
        slurmpre.checkpoint(6, sampler={"consumed": 1}),  # type: ignore[arg-type]
    ):
        pass
