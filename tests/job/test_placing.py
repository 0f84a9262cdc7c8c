"""Where a successor trains: the placement policy at the hand-over, from the ledger's facts
and the nodes Slurm lists, and the sbatch options that keep it off preemptible nodes."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import Checkpoint, Notice, Start, Submitted
from slurmpre.job.handover.placing import place, standard_args
from slurmpre.job.start.options import WatchConfig
from slurmpre.placement.policy import PREEMPTIBLE, STANDARD, Goals
from slurmpre.slurm.parse import NodeInfo

from tests.job.test_successor import harness, sbatch_calls
from tests.job.test_watch import EPOCH
from tests.records import dicts

T0 = 1_800_000_000.0
H = 3600.0


def node(name: str, state: str = "IDLE", *, drain: bool = False, feature: str = "preemptible"):
    flags = frozenset({"DRAIN"}) if drain else frozenset()
    return NodeInfo(name, state, flags, "preempted" if drain else None, (feature,))


CLUSTER = [
    node("gpu-dp-1", feature="standard"),
    node("gpu-preemptible-dp-1", "MIXED", drain=True),
    node("gpu-preemptible-dp-2"),
]


def run_so_far(steps: int, hours: float) -> list:
    """A run first submitted at T0 that trained ``steps`` steps in ``hours`` and was drained."""
    return [
        Submitted(job="1", name="tiny", time=T0),
        Start(job="1", attempt=0, nodes=("gpu-preemptible-dp-1",), step=0, time=T0 + 60),
        Checkpoint(job="1", attempt=0, step=steps, path="p", after_notice=True,
                   time=T0 + 60 + hours * H),
        Notice(job="1", attempt=0, kind="drain", node="gpu-preemptible-dp-1", reason="x",
               seen_at=T0 + 60 + hours * H, first=True, step_at_notice=steps),
    ]  # fmt: skip


def test_standard_args_clear_the_constraint_and_exclude_every_preemptible_node() -> None:
    assert standard_args(CLUSTER, ["gpu-preemptible-dp-1"]) == (
        "--constraint=",
        "--exclude=gpu-preemptible-dp-1,gpu-preemptible-dp-2",
    )


def test_no_goal_no_decision() -> None:
    assert place(Goals(), run_so_far(100, 1), CLUSTER, [], now=T0 + 2 * H, needed=1) is None


def test_a_run_ahead_of_its_deadline_waits_for_preemptible_nodes() -> None:
    goals = Goals(deadline="10h", total_steps=1000)
    got = place(goals, run_so_far(100, 0.5), CLUSTER, ["gpu-preemptible-dp-1"],
                now=T0 + 0.6 * H, needed=1)  # fmt: skip
    assert got is not None and got.decision.where == PREEMPTIBLE and got.args == ()
    assert got.situation.rate == 100 / (0.5 * H)  # measured from the ledger
    assert got.situation.deadline == T0 + 10 * H  # from the first submission


def test_a_run_behind_with_no_idle_preemptible_node_moves_to_standard() -> None:
    goals = Goals(deadline="10h", total_steps=1000)
    busy = [*CLUSTER[:2], node("gpu-preemptible-dp-2", "ALLOCATED")]
    got = place(goals, run_so_far(100, 0.5), busy, ["gpu-preemptible-dp-1"],
                now=T0 + 5 * H, needed=1)  # fmt: skip
    assert got is not None and got.decision.where == STANDARD
    assert got.args == ("--constraint=", "--exclude=gpu-preemptible-dp-1,gpu-preemptible-dp-2")


def test_a_run_whose_slack_is_spent_moves_even_with_preemptible_nodes_idle() -> None:
    goals = Goals(deadline="10h", total_steps=1000)
    got = place(goals, run_so_far(500, 5), CLUSTER, ["gpu-preemptible-dp-1"],
                now=T0 + 4.95 * H + 60, needed=1)  # fmt: skip
    assert got is not None and got.decision.where == STANDARD
    assert "one more preemption" in got.decision.why


def drained_at_step_14(tmp_path: Path, goals: Goals) -> tuple[Any, Path]:
    """A job with these goals whose node 2 drains, every other node idle; its notice
    checkpoint is step 14. The watcher harness after the hand-over, and what sbatch got."""
    h, seen = harness(tmp_path)
    h.watcher.restarts.config = WatchConfig(  # type: ignore[attr-defined]
        restart="successor", goals=goals
    )
    h.slurm.nodes = lambda names=(): (  # type: ignore[method-assign]
        [dataclasses.replace(n, flags=frozenset()) for n in CLUSTER] if not names else
        [node(n, "MIXED", drain=True) for n in names]
    )  # fmt: skip
    h.slurm.drains["gpu-preemptible-dp-2"] = (12.3, "preempted")
    h.at(20.0, lambda: h.commit(14))
    h.run()
    return h, seen


def test_at_the_hand_over_fallback_after_sends_the_successor_to_standard_nodes(
    tmp_path: Path,
) -> None:
    h, seen = drained_at_step_14(tmp_path, Goals(fallback_after=1))
    got = sbatch_calls(seen)[-1]
    assert got["argv"][-2:] == [
        "--constraint=", "--exclude=gpu-preemptible-dp-1,gpu-preemptible-dp-2"
    ]  # fmt: skip
    placed = h.record("placed")
    assert placed["where"] == "standard" and "fallback_after = 1" in placed["why"]
    assert any("on standard nodes" in s for s in h.said)


def test_at_the_hand_over_max_wait_queues_a_held_twin_on_standard_nodes(tmp_path: Path) -> None:
    h, seen = drained_at_step_14(tmp_path, Goals(max_wait_s=900))
    got = sbatch_calls(seen)[-1]  # the last sbatch: the twin
    assert got["argv"][-3:] == [
        "--constraint=", "--exclude=gpu-preemptible-dp-1,gpu-preemptible-dp-2", "--begin=now+900"
    ]  # fmt: skip
    placed = h.record("placed")
    assert placed["where"] == "preemptible" and placed["twin"] == "78"
    successors = [r for r in dicts(Ledger(h.folder)) if r["event"] == "successor"]
    assert len(successors) == 2 and "twin on standard nodes" in successors[1]["why"]


def test_on_standard_nodes_idle_preemptible_capacity_and_slack_are_a_notice_to_go_back(
    tmp_path: Path,
) -> None:
    from slurmpre.folder.records import Placed
    from slurmpre.job.handover.placing import ReturnSource

    from tests.fakes import Nodes

    ledger = Ledger(tmp_path)
    ledger.ensure()
    for r in run_so_far(500, 0.5):
        ledger.append(r)
    goals = Goals(deadline="10h", total_steps=1000)
    source = ReturnSource(goals, ledger, Nodes(CLUSTER), 1, wall=lambda: T0 + 0.6 * H)
    assert source.poll() == []  # it trains on preemptible nodes: nothing to go back to
    ledger.append(Placed(job="1", attempt=0, where="standard", why="x", decided_at=T0))
    (notice,) = source.poll()
    assert notice.kind == "placement" and "back to preemptible nodes" in (notice.reason or "")
    busy = [CLUSTER[0], CLUSTER[1], node("gpu-preemptible-dp-2", "ALLOCATED")]
    assert ReturnSource(goals, ledger, Nodes(busy), 1, wall=lambda: T0 + 0.6 * H).poll() == []
    late = ReturnSource(goals, ledger, Nodes(CLUSTER), 1, wall=lambda: T0 + 9.5 * H)
    assert late.poll() == []  # no slack left for a move and a preemption


def test_a_deadline_with_no_rate_yet_is_placed_once_the_notice_checkpoint_gives_it(
    tmp_path: Path,
) -> None:
    """The first notice of a run that never checkpointed: no rate at the hand-over, so
    the successor goes as the script says, and the decision (here: wait, with a held twin)
    follows the notice checkpoint, measured from it."""
    h, seen = harness(tmp_path)
    Ledger(h.folder).append(Submitted(job="42", name="tiny", time=EPOCH))
    Ledger(h.folder).append(
        Start(job="42", attempt=0, nodes=("gpu-preemptible-dp-1",), step=0, time=EPOCH)
    )
    h.watcher.restarts.config = WatchConfig(  # type: ignore[attr-defined]
        restart="successor", goals=Goals(deadline="2h", total_steps=1000)
    )
    h.slurm.nodes = lambda names=(): (  # type: ignore[method-assign]
        [dataclasses.replace(n, flags=frozenset({"DRAIN"})) for n in CLUSTER[1:]] + [CLUSTER[0]]
        if not names else [node(n, "MIXED", drain=True) for n in names]
    )  # fmt: skip
    h.slurm.drains["gpu-preemptible-dp-2"] = (12.3, "preempted")
    h.at(20.0, lambda: h.commit(14, after_notice=True))
    h.run()
    events = h.events()
    assert events.index("committed") < events.index("placed")  # decided after the rate
    placed = h.record("placed")
    assert placed["where"] == "preemptible" and placed["twin"] == "78"
    assert placed["rate"] == pytest.approx(14 / 20, rel=0.1)
    got = sbatch_calls(seen)[-1]
    assert got["argv"][-1].startswith("--begin=now+")


def storm_of(n: int) -> list:
    """A run preempted ``n`` times in a row, each attempt 30 s after its start."""
    recs: list = [Submitted(job="1", name="tiny", time=T0)]
    for i in range(n):
        t = T0 + i * 200
        recs += [
            Start(job="1", attempt=i, nodes=("gpu-preemptible-dp-1",), step=i, time=t),
            Notice(job="1", attempt=i, kind="drain", node="gpu-preemptible-dp-1", reason="x",
                   seen_at=t + 30, first=True, step_at_notice=i + 1),
        ]  # fmt: skip
    return recs


def test_preemptions_faster_than_progress_fall_back_or_back_off() -> None:
    from slurmpre.job.handover.placing import held_back
    from slurmpre.placement.facts import read

    assert read(storm_of(2)).storm == 2 and read(storm_of(4)).storm == 4
    assert held_back(Goals(), storm_of(2), now=T0) is None  # not yet a storm
    waits = held_back(Goals(), storm_of(4), now=T0)
    assert waits is not None and waits.args == ("--begin=now+120",)
    assert "4 preemptions in a row came faster than progress" in waits.decision.why
    moves = place(Goals(max_wait_s=3600), storm_of(3), CLUSTER, [], now=T0 + 700, needed=1)
    assert moves is not None and moves.decision.where == STANDARD
    assert "faster than progress" in moves.decision.why
