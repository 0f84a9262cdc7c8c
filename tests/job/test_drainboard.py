"""The shared drain board: one Slurm query per interval for all of a user's jobs, and no
job waiting on another's poll longer than one interval (#26 item 1)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from pathlib import Path

from slurmpre.job.handover import slots
from slurmpre.job.watch import drainboard
from slurmpre.job.watch.drainboard import GRACE, READ_EVERY, DrainBoard
from slurmpre.job.watch.notice import DrainSource
from slurmpre.slurm.parse import NodeInfo

from tests.fakes import FakeSlurm
from tests.job.conftest import Clock

INTERVAL = 5.0
START = 1_000_000.0  # wall clock


class Cluster(FakeSlurm):
    """Nodes whose drains a test sets; every `nodes` query counted, by who asked."""

    def __init__(self) -> None:
        self.drained: dict[str, float] = {}
        self.asked: list[tuple[str, ...]] = []

    def nodes(self, names: Sequence[str] = ()) -> list[NodeInfo]:
        self.asked.append(tuple(names))
        return [
            NodeInfo(
                n,
                "MIXED",
                frozenset({"DRAIN"} if n in self.drained else ()),
                "preempted" if n in self.drained else None,
                (),
                reason_time=self.drained.get(n),
            )
            for n in names
        ]


def board(tmp_path: Path, me: str, slurm: Cluster, clock: Clock, nodes: list[str]) -> DrainBoard:
    b = DrainBoard(tmp_path / "watch", me, slurm, INTERVAL, jitter=0.0, wall=clock)
    assert b.register(nodes)
    return b


def drained(b: DrainBoard, nodes: list[str]) -> set[str]:
    return {n.name for n in b.nodes(nodes) if n.draining}


def test_one_job_polls_for_all_and_the_others_read_its_answer(tmp_path: Path) -> None:
    slurm, clock = Cluster(), Clock(START)
    jobs = {f"{i}": board(tmp_path, f"{i}", slurm, clock, [f"n{i}"]) for i in range(10)}
    for t in range(60):  # a minute, each job looking once a second
        clock.now += 1.0
        if t == 30:
            slurm.drained["n7"] = clock.now
        seen = {me: drained(b, [f"n{me}"]) for me, b in jobs.items()}
        if t >= 30 + INTERVAL + 1:
            assert seen["7"] == {"n7"}  # within the interval (and the second of reading)
        assert all(not s for me, s in seen.items() if me != "7")
    # one poll per interval for all ten (each naming every registered node), not ten
    assert len(slurm.asked) <= 60 / INTERVAL + 1
    assert set(slurm.asked[-1]) == {f"n{i}" for i in range(10)}
    assert sum(b.holding for b in jobs.values()) == 1
    assert sum(b.tally.shared_answers for b in jobs.values()) > 400
    for b in jobs.values():
        b.close()
    assert not (tmp_path / "watch" / "lease.json").exists()
    assert not list((tmp_path / "watch" / "jobs").iterdir())


def test_when_the_holder_stops_no_job_waits_longer_than_an_interval(tmp_path: Path) -> None:
    slurm, clock = Cluster(), Clock(START)
    holder = board(tmp_path, "1", slurm, clock, ["a"])
    other = board(tmp_path, "2", slurm, clock, ["b"])
    clock.now += 1
    holder.nodes(["a"])
    other.nodes(["b"])
    assert holder.holding and not other.holding and len(slurm.asked) == 1
    # the holder's job hangs (it neither polls nor releases its lease); a drain comes
    last_poll = clock.now
    slurm.drained["b"] = clock.now + 1
    first_seen = took = None
    for _ in range(40):
        clock.now += 1.0
        if drained(other, ["b"]) and first_seen is None:
            first_seen = clock.now
        if other.holding and took is None:
            took = clock.now
    assert first_seen is not None
    assert first_seen - slurm.drained["b"] <= INTERVAL + GRACE + 1
    # the lease is handed on within an interval of the missed poll (not at its end,
    # three intervals on), and the new holder polls for both jobs
    assert took is not None and took - last_poll <= INTERVAL + GRACE + READ_EVERY + 1, took
    assert slurm.asked[-1] == ("a", "b")
    assert len(slurm.asked) <= 1 + 40 / INTERVAL + 1


def test_a_holder_on_time_keeps_its_lease_against_a_job_with_a_shorter_interval(
    tmp_path: Path,
) -> None:
    """Renewed on time by its own interval, a lease is not taken over: no churn."""
    slurm, clock = Cluster(), Clock(START)
    holder = board(tmp_path, "1", slurm, clock, ["a"])
    assert holder.nodes(["a"]) is not None and holder.holding
    quick = DrainBoard(tmp_path / "watch", "2", slurm, 2.0, jitter=0.0, wall=clock)
    assert quick.register(["a"])
    for _ in range(30):
        clock.now += 1.0
        holder.nodes(["a"])
        quick.nodes(["a"])
        assert holder.holding and not quick.holding


def test_a_board_or_lease_that_is_not_an_owner_only_file_is_not_believed(tmp_path: Path) -> None:
    slurm, clock = Cluster(), Clock(START)
    reader = board(tmp_path, "2", slurm, clock, ["b"])
    folder = tmp_path / "watch"
    forged = {"v": 1, "by": "9", "polled_at": clock.now, "asked": ["b"], "nodes": []}
    (folder / "board.json").write_text(json.dumps(forged))
    (folder / "board.json").chmod(0o666)  # anyone could have written it
    # a lease held by someone else, but written group-writable: not believed either
    (folder / "lease.json").write_text(json.dumps({"holder": "9", "until": clock.now + 99}))
    (folder / "lease.json").chmod(0o664)
    slurm.drained["b"] = clock.now
    assert drained(reader, ["b"]) == {"b"}  # from Slurm: the forged board said nothing
    assert reader.holding  # the forged lease did not keep it out
    assert json.loads((folder / "board.json").read_text())["by"] == "2"
    assert oct((folder / "board.json").stat().st_mode & 0o777) == "0o600"


def test_a_board_link_leading_elsewhere_is_not_read(tmp_path: Path) -> None:
    slurm, clock = Cluster(), Clock(START)
    reader = board(tmp_path, "2", slurm, clock, ["b"])
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"v": 1, "by": "9", "polled_at": clock.now, "asked": ["b"],
                                     "nodes": []}))  # fmt: skip
    elsewhere.chmod(0o600)
    (tmp_path / "watch" / "board.json").symlink_to(elsewhere)
    (tmp_path / "watch" / "lease.json").write_text(json.dumps({"holder": "9", "until": 1e12}))
    (tmp_path / "watch" / "lease.json").chmod(0o600)
    slurm.drained["b"] = clock.now
    assert drained(reader, ["b"]) == {"b"} and slurm.asked == [("b",)]


def test_a_folder_others_may_write_is_not_shared(tmp_path: Path, said: list[str]) -> None:
    (tmp_path / "watch").mkdir(mode=0o777)
    (tmp_path / "watch").chmod(0o777)
    b = DrainBoard(tmp_path / "watch", "1", Cluster(), INTERVAL, wall=Clock(START))
    assert not b.register(["a"])
    assert "not shared" in said[0]


def test_where_the_board_is_and_how_sharing_is_turned_off(tmp_path: Path) -> None:
    env = {"HOME": "/home/u", "SLURM_CLUSTER_NAME": "big/one"}
    assert drainboard.folder(env) == Path("/home/u/.local/state/slurmpre/watch/big_one")
    assert drainboard.folder({**env, "XDG_STATE_HOME": "/s"}) == Path("/s/slurmpre/watch/big_one")
    assert drainboard.folder({**env, "SLURMPRE_SHARED_DIR": "/x"}) == Path("/x")
    assert drainboard.folder({**env, "SLURMPRE_SHARED_WATCH": "0"}) is None


def test_the_drain_source_reads_the_board_every_second(tmp_path: Path) -> None:
    slurm, clock = Cluster(), Clock(START)
    b = board(tmp_path, "1", slurm, clock, ["a"])
    source = DrainSource(b, ["a"], every=drainboard.READ_EVERY, close=b.close, wall=clock)
    assert source.poll() == []
    slurm.drained["a"] = clock.now
    clock.now += INTERVAL
    (notice,) = source.poll()
    assert (notice.node, notice.reason, notice.at) == ("a", "preempted", slurm.drained["a"])
    source.close()
    assert not (tmp_path / "watch" / "jobs" / "1.json").exists()


def test_restarts_take_one_of_a_few_slots_and_go_anyway_after_the_wait(tmp_path: Path) -> None:
    env = {"SLURMPRE_SHARED_DIR": str(tmp_path / "watch")}
    slept: list[float] = []
    with contextlib.ExitStack() as held:
        for _ in range(slots.SUBMIT_SLOTS):  # the slots all taken by other restarts
            held.enter_context(slots.submit_slot(env, sleep=slept.append))
        assert slept == []  # a free slot costs nothing
        now = [0.0]

        def sleep(s: float) -> None:
            slept.append(s)
            now[0] += s

        with slots.submit_slot(env, sleep=sleep, clock=lambda: now[0]):
            pass  # it went anyway
        assert slots.SLOT_WAIT <= sum(slept) <= slots.SLOT_WAIT + 1.0
        assert all(0.1 <= s <= 1.0 for s in slept)  # jittered steps
    with slots.submit_slot({"SLURMPRE_SHARED_WATCH": "0"}):
        pass  # sharing off: no slot, no wait


def test_a_job_that_ends_releases_its_lease_and_the_next_to_find_the_board_late_takes_it(
    tmp_path: Path,
) -> None:
    slurm, clock = Cluster(), Clock(START)
    holder = board(tmp_path, "1", slurm, clock, ["a"])
    other = board(tmp_path, "2", slurm, clock, ["b"])
    holder.nodes(["a"])
    other.nodes(["b"])
    assert holder.holding and not other.holding
    holder.close()
    assert not (tmp_path / "watch" / "lease.json").exists()
    clock.now += INTERVAL + GRACE + 0.5  # the board lags: the other job's next read
    other.nodes(["b"])
    assert other.holding
    lease = json.loads((tmp_path / "watch" / "lease.json").read_text())
    assert lease["holder"] == "2" and lease["at"] == clock.now


def test_a_board_stamped_in_the_future_is_stale_not_fresh_forever(tmp_path: Path) -> None:
    """A holder on a node whose clock runs an hour ahead wrote a board that, by this
    node's clock, was polled in the future: it read as fresh for the next hour, and the
    drains it did not show were missed (#35). So is a lease renewed in the future."""
    slurm, clock = Cluster(), Clock(START)
    reader = board(tmp_path, "2", slurm, clock, ["b"])
    folder = tmp_path / "watch"
    ahead = clock.now + 3600
    stale = {"v": 1, "by": "9", "polled_at": ahead, "asked": ["b"], "nodes": []}
    (folder / "board.json").write_text(json.dumps(stale))
    (folder / "board.json").chmod(0o600)
    lease = {"v": 1, "holder": "9", "until": ahead + 15, "at": ahead, "interval": INTERVAL}
    (folder / "lease.json").write_text(json.dumps(lease))
    (folder / "lease.json").chmod(0o600)
    slurm.drained["b"] = clock.now
    assert drained(reader, ["b"]) == {"b"}  # asked Slurm: the board was not believed
    assert reader.holding  # and the lease from the future did not keep it out
    # A clock a little ahead (within the bound) is still believed: no churn on skew.
    near = {**stale, "by": "9", "polled_at": clock.now + 2, "nodes": []}
    (folder / "board.json").write_text(json.dumps(near))
    other = board(tmp_path, "3", Cluster(), clock, ["b"])
    assert drained(other, ["b"]) == set() and not other.holding


class WholeCluster(Cluster):
    """Four nodes; a query without names answers for all of them (as scontrol does)."""

    ALL = ("n0", "n1", "p3", "p4")

    def nodes(self, names: Sequence[str] = ()) -> list[NodeInfo]:
        answer = super().nodes(names or self.ALL)
        self.asked[-1] = tuple(names) or ("*",)
        return [NodeInfo(n.name, "IDLE", n.flags, n.reason, ("preemptible",)) for n in answer]


def test_a_job_that_may_grow_reads_every_node_from_the_same_one_poll(tmp_path: Path) -> None:
    """Grow back watches the cluster's idle nodes through the board: the holder asks about
    every node in its one query per interval, and no job asks Slurm on its own."""
    slurm, clock = WholeCluster(), Clock(START)
    grower = DrainBoard(
        tmp_path / "watch", "0", slurm, INTERVAL, jitter=0.0, wall=clock, everything=True
    )
    assert grower.register(["n0"])
    other = board(tmp_path, "1", slurm, clock, ["n1"])
    for _ in range(60):
        clock.now += 1.0
        other.nodes(["n1"])
        grower.nodes(["n0"])
        seen = grower.every_node()
        assert {n.name for n in seen} == set(WholeCluster.ALL)
        assert all(n.features == ("preemptible",) for n in seen)  # the board keeps features
    assert len(slurm.asked) <= 60 / INTERVAL + 1  # one poll per interval, for both jobs
    assert all(a == ("*",) for a in slurm.asked)  # ... and each about every node
    assert grower.tally.shared_answers + other.tally.shared_answers > 60


def test_without_a_job_that_may_grow_the_poll_names_only_the_registered_nodes(
    tmp_path: Path,
) -> None:
    slurm, clock = WholeCluster(), Clock(START)
    jobs = [board(tmp_path, f"{i}", slurm, clock, [f"n{i}"]) for i in range(2)]
    for _ in range(12):
        clock.now += 1.0
        for i, b in enumerate(jobs):
            b.nodes([f"n{i}"])
    assert slurm.asked and all(set(a) == {"n0", "n1"} for a in slurm.asked)


def test_the_watcher_watches_and_restarts_by_the_environment_it_is_given(tmp_path: Path) -> None:
    """The board and the successor's environment are the job's (`run_attempt`'s ``env``),
    not this process's."""
    from slurmpre.folder.ledger import Ledger
    from slurmpre.job.start.args import parse_args
    from slurmpre.job.start.env import JobEnv
    from slurmpre.job.start.resume import AttemptContext
    from slurmpre.job.start.run import watcher_for
    from slurmpre.signals import Latch

    from tests.fakes import Jobs

    opts = parse_args(["--checkpoint-dir", str(tmp_path), "--", "python", "train.py"])
    job = JobEnv("42", 0, 0, ("n1",), "n1", 0)
    at = AttemptContext(opts, job, tmp_path, Ledger(tmp_path), Jobs({}, down=True), {})
    shared = {"SLURMPRE_SHARED_DIR": str(tmp_path / "board")}
    for env, board in ((shared, True), ({"SLURMPRE_SHARED_WATCH": "0"}, False)):
        watcher = watcher_for(at, Latch(), env)()
        drain = watcher.schedules[0].source
        assert isinstance(drain, DrainSource)
        assert isinstance(drain.client, DrainBoard) is board
        assert watcher.restarts.env is env
        if drain.close is not None:
            drain.close()
