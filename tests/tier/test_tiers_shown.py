"""`slurmpre status` says where each checkpoint saved on the nodes is: pulled by the job
that took over, flushing, in the folder, or never there."""

from __future__ import annotations

from slurmpre.folder.records import Adopted, Checkpoint, PullAsked, PullDone, Replicated, Saved
from slurmpre.login import tiers


def _saved(job: str, step: int, after: bool = False) -> Saved:
    return Saved(
        job=job,
        attempt=0,
        step=step,
        path=f"/dev/shm/x/step-{step}",
        seconds=0.4,
        after_notice=after,
    )


def test_each_checkpoints_tiers_from_the_ledger() -> None:
    records = [
        _saved("7", 10),
        Checkpoint(
            job="7",
            attempt=0,
            step=10,
            path="/c/step-10",
            after_notice=False,
            seconds=0.4,
            flush_seconds=96.2,
        ),
        _saved("7", 15, after=True),
        PullDone(job="8", attempt=0, predecessor="7", step=15, ok=True),
        _saved("8", 20),
        _saved("99", 25),  # another run's
    ]
    rows = tiers.of_run(records, ["7", "8"])
    assert [r.step for r in rows] == [10, 15, 20]
    shown = [r.line(running=True) for r in rows]
    assert shown == [
        "step 10: saved on job 7's nodes (0.4 s), in the folder (flushed in 96 s)",
        "step 15: saved on job 7's nodes (0.4 s), pulled by job 8, flushing",
        "step 20: saved on job 8's nodes (0.4 s), flushing",
    ]
    assert rows[2].line(running=False).endswith("never in the folder (skipped or cut)")


def test_a_run_without_the_tier_shows_no_rows() -> None:
    records = [Checkpoint(job="7", attempt=0, step=10, path="/c", after_notice=False)]
    assert tiers.of_run(records, ["7"]) == []


def test_a_step_kept_on_the_next_node_and_taken_over_after_a_node_was_lost() -> None:
    records = [
        _saved("7", 10),
        Replicated(job="7", attempt=0, node=0, of=1, step=10, bytes=9, seconds=0.1),
        Replicated(job="7", attempt=0, node=1, of=0, step=10, bytes=9, seconds=0.1),
        Adopted(job="7", attempt=1, node=0, step=10, source="7-0", nodes=2),
    ]
    (row,) = tiers.of_run(records, ["7"])
    assert row.line(running=True) == (
        "step 10: saved on job 7's nodes (0.4 s), each part also on the next node (2 nodes), "
        "taken over on the nodes by attempt 7.1, flushing"
    )


def test_a_pull_that_failed_is_said_with_its_reason() -> None:
    """A successor whose pull was cut resumed from the folder's newest checkpoint (bench
    scene "1 node, pull cut midway"); in place, the next step waited for the flush."""
    records = [
        _saved("7", 15, after=True),
        PullDone(job="8", attempt=0, predecessor="7", step=15, ok=False, why="node 0: cut"),
        _saved("8", 20, after=True),
        PullDone(job="8", attempt=0, predecessor="8", step=20, ok=False, why="too late"),
        _saved("8", 30),  # then a node lost; the restart could not gather it
        PullDone(job="8", attempt=1, predecessor="8", step=30, ok=False, why="node 1: gone"),
    ]
    shown = [r.line(running=True) for r in tiers.of_run(records, ["7", "8"])]
    assert shown == [
        "step 15: saved on job 7's nodes (0.4 s), job 8 could not pull it (node 0: cut): "
        "it resumed from the folder, flushing",
        "step 20: saved on job 8's nodes (0.4 s), the nodes kept could not pull it (too late): "
        "the next step waited for its flush, flushing",
        "step 30: saved on job 8's nodes (0.4 s), the restart could not pull it (node 1: gone): "
        "it resumed from the folder, flushing",
    ]


def test_a_save_pulled_by_the_next_step_started_beside_it_on_a_spare() -> None:
    """A hot spare: the drained step's node 0 asked the next step's nodes (in place 1) to
    pull its last save, and recorded the outcome under its own step (`tier.in_place`); a
    later pull of the next step's save, asked the same way, failed."""
    records = [
        _saved("7", 15, after=True),
        PullAsked(job="7", attempt=0, in_place=1, predecessor="7", step=15, sources=("h:1",)),
        PullDone(job="7", attempt=0, predecessor="7", step=15, ok=True),
        Saved(job="7", attempt=0, in_place=1, step=30, path="/dev/shm/x/step-30",
              seconds=0.4, after_notice=True),
        PullAsked(job="7", attempt=0, in_place=2, predecessor="7", step=30, sources=("h:1",)),
        PullDone(job="7", attempt=0, in_place=1, predecessor="7", step=30, ok=False,
                 why="node 1: cut"),
    ]  # fmt: skip
    shown = [r.line(running=True) for r in tiers.of_run(records, ["7"])]
    assert shown == [
        "step 15: saved on job 7's nodes (0.4 s), pulled by the next step's nodes, flushing",
        "step 30: saved on job 7's nodes (0.4 s), the next step's nodes could not pull it "
        "(node 1: cut): it resumed from the folder, flushing",
    ]
    # The kept nodes' own pull in place (asked under the drained step) reads as before.
    kept = [records[0], records[2]]
    assert tiers.of_run(kept, ["7"])[0].line(running=True) == (
        "step 15: saved on job 7's nodes (0.4 s), flushing"
    )
