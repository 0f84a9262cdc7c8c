"""Grow back (#36): a job on fewer nodes than its range allows hands over to a bigger
successor once idle preemptible nodes have settled, without Slurm (sbatch is a stand-in
that records each call; the sandbox test submits to the real one)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from slurmpre.errors import SlurmError
from slurmpre.folder.checkpoints import writing
from slurmpre.folder.layout import FolderLayout
from slurmpre.job.start.env import JobEnv
from slurmpre.job.start.options import WatchConfig
from slurmpre.job.watch.grow import GrowSource, writing_checkpoint
from slurmpre.job.watch.watcher import _Schedule
from slurmpre.slurm.parse import NodeInfo

from tests.job.conftest import Clock
from tests.job.test_successor import (
    fake_sbatch,
    job_env,
    recorded_submit,
    sbatch_calls,
    waiting,
)
from tests.job.test_watch import EPOCH, Harness

ONE = JobEnv("42", 0, 0, ("p1",), "p1", 0)


def node(name: str, state: str = "IDLE", features: tuple[str, ...] = ("preemptible",)) -> NodeInfo:
    flags = frozenset({"DRAIN"}) if state == "DRAIN" else frozenset()
    return NodeInfo(name, "IDLE" if state == "DRAIN" else state, flags, None, features)


class Cluster:
    """What the drain board answers for every node: a test sets it as time goes."""

    def __init__(self, *nodes: NodeInfo) -> None:
        self.nodes = list(nodes)

    def __call__(self) -> Sequence[NodeInfo]:
        return self.nodes


def source(cluster: Cluster, wall: Clock, **kw: object) -> GrowSource:
    args = {"settle": 10.0, "min_gain": 1, "wall": wall, **kw}
    return GrowSource(cluster, ("p1", "p2"), 4, **args)  # type: ignore[arg-type]


def test_a_node_must_stay_idle_for_the_settle_time_and_one_that_vanishes_starts_again() -> None:
    wall, cluster = Clock(), Cluster(node("p1", "ALLOCATED"), node("p2", "ALLOCATED"), node("p3"))
    grow = source(cluster, wall)
    assert grow.poll() == []
    wall.now = 9.0
    assert grow.poll() == []  # idle 9 s: not yet
    cluster.nodes[2] = node("p3", "ALLOCATED")  # another job took it
    wall.now = 10.0
    assert grow.poll() == []
    cluster.nodes[2] = node("p3")
    wall.now = 15.0
    assert grow.poll() == []  # idle again since 15 s: its count starts again
    wall.now = 25.0
    (notice,) = grow.poll()
    assert (notice.kind, notice.grow_to, notice.at_once) == ("grow", 3, False)
    assert "growing from 2 to 3 nodes" in str(notice.reason)
    assert grow.poll() == []  # once: the hand-over follows


def test_only_idle_preemptible_nodes_of_others_count_and_never_past_the_max() -> None:
    wall = Clock()
    cluster = Cluster(
        node("p1"), node("p2"),  # the job's own (idle as Slurm may show them: not counted)
        node("p3", "DRAIN"), node("p4", "DOWN"), node("s1", features=("standard",)),
        node("p5", "MIXED"), node("p6"), node("p7"), node("p8"), node("p9"),
    )  # fmt: skip
    grow = source(cluster, wall)
    grow.poll()
    wall.now = 10.0
    (notice,) = grow.poll()
    assert notice.grow_to == 4  # 4 idle (p6-p9), but the range's MAX is 4: 2 more
    assert notice.at_once  # the idle nodes alone hold a 4-node job
    assert grow.plan is not None and grow.plan.idle == ("p6", "p7", "p8", "p9")


def test_a_gain_below_the_minimum_or_a_checkpoint_being_written_waits() -> None:
    wall, cluster = Clock(), Cluster(node("p3"))
    grow = source(cluster, wall, min_gain=2)
    grow.poll()
    wall.now = 60.0
    assert grow.poll() == []  # one node: less than the gain asked for
    cluster.nodes.append(node("p4"))
    wall.now = 70.0
    assert grow.poll() == []  # p4 has not settled yet
    busy = [True]
    grow.writing = lambda: busy[0]
    wall.now = 80.0
    assert grow.poll() == []  # a checkpoint is being written: not now
    busy[0] = False
    (notice,) = grow.poll()
    assert notice.grow_to == 4


def test_a_checkpoint_being_written_is_this_attempts_own_in_flight_folder(tmp_path: Path) -> None:
    assert not writing_checkpoint(tmp_path, "42-0-")
    with writing(tmp_path, 5, attempt_tag="42-0-7") as incoming:
        (incoming / "w").write_text("5")
        assert writing_checkpoint(tmp_path, "42-0-")
        assert not writing_checkpoint(tmp_path, "43-0-")  # another job's is not this one's
    assert not writing_checkpoint(tmp_path, "42-0-")


# -- the hand-over -------------------------------------------------------------------
DB_INDEX = (
    "slurm_update error: Job update not available right now, the DB index is being set, "
    "try again in a bit"
)


def growing(tmp_path: Path, idle: int, *, fails: bool = False) -> tuple[Harness, Path]:
    """A job on p1 (of a 1-3 range) and ``idle`` preemptible nodes idle from t=0."""
    folder = tmp_path / "ckpt"
    folder.mkdir()
    calls = fake_sbatch(tmp_path, fails=fails)
    recorded_submit(folder)
    env = job_env(tmp_path, SLURM_JOB_ID="42")
    h = Harness(folder, config=WatchConfig(restart="successor", grow_to=3), env=env, job=ONE)
    h.slurm.requeue_flag = True  # type: ignore[attr-defined]

    def set_requeue(job_id: str, requeue: bool) -> None:
        h.slurm.requeue_flag = requeue  # type: ignore[attr-defined]

    h.slurm.set_requeue = set_requeue  # type: ignore[method-assign]
    cluster = Cluster(node("p1", "ALLOCATED"), *(node(f"p{i}") for i in range(2, 2 + idle)))
    grow = GrowSource(cluster, ONE.nodes, 3, settle=10.0, wall=h.clock.wall, every=1.0)
    h.watcher.schedules.append(_Schedule(grow))
    FolderLayout(folder).goes_on("42", 0).touch()
    h.listening()
    return h, calls


def notice_stop(h: Harness) -> bool | None:
    path = FolderLayout(h.folder).notice("42", 0)
    return json.loads(path.read_text())["stop"] if path.exists() else None


def submitted(calls: Path) -> list[list[str]]:
    return [call["argv"] for call in sbatch_calls(calls)]


def test_with_idle_nodes_enough_the_bigger_job_starts_while_this_one_trains(
    tmp_path: Path,
) -> None:
    h, calls = growing(tmp_path, idle=3)  # a 3-node job fits on them alone
    seen: dict[str, object] = {}
    h.at(15.0, lambda: seen.setdefault("before it waits", notice_stop(h)))
    h.at(20.0, lambda: waiting(h))  # the 3-node job has started, and waits
    h.at(22.0, lambda: h.commit(14, after_notice=True))  # the stop checkpoint
    h.run()
    assert seen == {"before it waits": None}  # nothing asked of the training until then
    assert notice_stop(h) is True
    bigger, twin = submitted(calls)
    assert bigger[-1] == "--nodes=3"
    assert twin[-1] == "--begin=now+180"  # GROW_WAIT + TWIN_AFTER, in case nodes are taken
    notice = h.record("notice")
    assert (notice["kind"], notice["nodes"], notice["grow_to"]) == ("grow", 1, 3)
    assert 10.0 <= float(notice["seen_at"]) - EPOCH <= 12.0  # type: ignore[arg-type]
    assert h.events() == ["successor", "successor", "notice", "waiting", "stopping",
                          "checkpoint", "committed"]  # fmt: skip
    assert h.watcher.outcome.successor == "77" and h.slurm.requeued == []
    assert h.slurm.requeue_flag is False  # type: ignore[attr-defined]


def test_without_enough_idle_nodes_every_rank_checkpoints_and_stops_at_once(
    tmp_path: Path,
) -> None:
    h, calls = growing(tmp_path, idle=1)
    seen: dict[str, object] = {}
    h.at(13.0, lambda: seen.setdefault("at the grow", notice_stop(h)))
    h.at(14.0, lambda: h.commit(14, after_notice=True))
    h.run()
    assert seen == {"at the grow": True}  # the 2-node job needs this job's node
    bigger, twin = submitted(calls)
    assert bigger[-1] == "--nodes=2" and twin[-1] == "--begin=now+120"
    assert h.watcher.outcome.successor == "77"


def test_a_refused_bigger_job_changes_nothing_and_the_training_goes_on(tmp_path: Path) -> None:
    """The refusal may pass (Slurm 22.05 refuses job updates for a while after a resize):
    tried again once the idle nodes have stayed idle for the settle time again, not at
    every poll (settle 10 s, idle from 0: at about 10 s and 21 s before the end at 30 s)."""
    h, calls = growing(tmp_path, idle=3, fails=True)
    h.at(30.0, lambda: h.watcher.stop())  # the training ends on its own, much later
    h.run()
    assert notice_stop(h) is None  # the training never heard of it
    assert h.slurm.requeue_flag is True  # type: ignore[attr-defined]
    assert h.watcher.outcome.successor is None and h.events() == []
    assert any("not growing" in s for s in h.said)
    assert len(submitted(calls)) == 2


def test_a_job_slurm_will_not_update_after_a_resize_grows_all_the_same(tmp_path: Path) -> None:
    """Slurm 22.05 refuses ``Requeue=0`` for a job it has resized ("the DB index is being
    set"); a grow kills nothing, and an attempt Slurm might requeue finds the hand-over."""
    h, calls = growing(tmp_path, idle=3)

    def refuse(job_id: str, requeue: bool) -> None:
        raise SlurmError(DB_INDEX)

    h.slurm.set_requeue = refuse  # type: ignore[method-assign]
    h.at(20.0, lambda: waiting(h))
    h.at(22.0, lambda: h.commit(14, after_notice=True))
    h.run()
    assert submitted(calls)[0][-1] == "--nodes=3"
    assert h.watcher.outcome.successor == "77" and h.slurm.requeued == []
    assert any("growing anyway" in s for s in h.said)


def test_a_grow_refused_twice_leaves_the_requeue_flag_it_never_changed(tmp_path: Path) -> None:
    """Requeue=0 refused, then the bigger job refused: nothing to undo, so no second
    update is sent (and no line says the job could not be made requeueable again)."""
    h, calls = growing(tmp_path, idle=3, fails=True)
    updates: list[bool] = []

    def refuse(job_id: str, requeue: bool) -> None:
        updates.append(requeue)
        raise SlurmError(DB_INDEX)

    h.slurm.set_requeue = refuse  # type: ignore[method-assign]
    h.at(30.0, lambda: h.watcher.stop())
    h.run()
    assert submitted(calls) and set(updates) == {False}
    assert not any("requeueable again" in s for s in h.said)


def test_a_bigger_job_that_does_not_start_in_time_gets_this_ones_checkpoint_anyway(
    tmp_path: Path,
) -> None:
    """The idle nodes were taken between the look and the submission: the bigger job pends.
    After GROW_WAIT the training checkpoints and stops; the bigger job (or its twin)
    starts on this job's nodes once it ends."""
    h, _ = growing(tmp_path, idle=3)
    seen: dict[str, object] = {}
    h.at(60.0, lambda: seen.setdefault("within the wait", notice_stop(h)))
    h.run()
    assert seen == {"within the wait": None}
    assert notice_stop(h) is True  # told to stop at GROW_WAIT after the grow
    notice = h.record("notice")
    assert float(notice["deadline_at"]) - float(notice["seen_at"]) == pytest.approx(60, abs=1)
    assert h.watcher.outcome.successor == "77" and h.slurm.requeued == []


def test_a_job_on_standard_nodes_does_not_grow_onto_preemptible_ones() -> None:
    wall = Clock()
    cluster = Cluster(node("p1", "ALLOCATED", ("standard",)), node("p3"), node("p4"))
    grow = GrowSource(cluster, ("p1",), 3, settle=0.0, wall=wall)
    wall.now = 100.0
    assert grow.poll() == [] and grow.poll() == []
    cluster.nodes[0] = node("p1", "ALLOCATED")  # the same job, were it on a preemptible node
    assert grow.poll()[0].grow_to == 3
