"""A step restarted in place with the node-local tier, in one process: the nodes it keeps
pull its notice save before the drained node goes, and the next step takes that copy
over from their folders; a pull that fails, or comes too late, says so and leaves the
flush to the folder; only a whole copy of the job's own is ever taken over."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Any

import pytest
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import (
    Adopted,
    AttemptId,
    InPlaceRequested,
    Notice,
    PullAsked,
    PullDone,
    Pulled,
    Serving,
    Start,
)
from slurmpre.tier import handoff, in_place, local, salvage, serving, transfer

from tests.conftest import wait_for

STEP = AttemptId(0, 0)


def _part(run: Path, step: int, files: dict[str, bytes], node: int, nodes: int) -> None:
    written = local.incoming(run, step, "7-0-")
    written.mkdir(parents=True)
    for rel, data in files.items():
        (written / rel).write_bytes(data)
    meta = {"job": "7", "attempt": 0, "seconds": 0.1, "node": node, "nodes": nodes}
    local.seal(written, run, step, meta)


def _step(folder: Path, tmp_path: Path) -> tuple[list[Path], list[transfer.Server]]:
    """Job 7's first step on n0 and n1: each sealed its part of step 12 after the notice
    and serves it; each node's wrapper runs a puller."""
    ledger, runs, servers = Ledger(folder), [], []
    ledger.append(Start(job="7", attempt=0, nodes=("n0", "n1"), num_nodes=2, world_size=2))
    for node, data in enumerate((b"a" * 3000, b"b" * 5000)):
        run = tmp_path / f"n{node}" / "7-0"
        run.mkdir(parents=True)
        _part(run, 12, {f"__{node}_0.distcp": data}, node=node, nodes=2)
        server = transfer.Server(run, handoff.run_key(folder)).start()
        ledger.append(Serving(job="7", attempt=0, node=f"n{node}", host="127.0.0.1",
                              port=server.port))  # fmt: skip
        handoff.Puller(run, folder, Ledger(folder), job="7", attempt=0, node=node,
                       poll=0.05).start()  # fmt: skip
        runs.append(run)
        servers.append(server)
    return runs, servers


def _pull(folder: Path, keep: tuple[str, ...]) -> bool:
    pull = in_place.InPlacePull(Ledger(folder), "7", STEP, ("n0", "n1"), keep)
    wait_for("the pull's end", lambda: pull.poll(12, late=False) is not None, timeout=60)
    return bool(pull.result)


def test_the_kept_node_pulls_the_save_whole_and_the_next_step_takes_it_over(
    tmp_path: Path, folder: Path, said: list[str]
) -> None:
    runs, servers = _step(folder, tmp_path)
    assert _pull(folder, ("n0",)) is True  # n1 drained: n0 is kept
    records = Ledger(folder).records()
    (asked,) = [r for r in records if isinstance(r, PullAsked)]
    assert asked.pullers == (0,) and len(asked.sources) == 2
    (done,) = [r for r in records if isinstance(r, PullDone)]
    assert done.ok and done.predecessor == "7"
    assert not handoff.pulled_by_successor(records, "7", 12)  # its own: the flush goes on
    (whole,) = local.parts(runs[0])
    assert whole.whole and set(whole.files) == {"__0_0.distcp", "__1_0.distcp"}
    assert not local.parts(runs[1])[0].whole  # the drained node pulled nothing
    assert said[-1].startswith("step 12 pulled onto the node(s) kept")
    for server in servers:
        server.close()
    # The next step, on n0 alone: it takes the copy over, and resumes from it.
    nxt = tmp_path / "n0" / "7-0.1"
    nxt.mkdir()
    taken = salvage.adopt(nxt, "7", newer_than=10)
    assert taken == [salvage.Taken(12, 2, None, "7-0", "7.0.0")] and not local.parts(runs[0])
    assert (nxt / "step-00000012" / "__1_0.distcp").read_bytes() == b"b" * 5000
    copy = str(nxt / "step-00000012")
    assert local.nearest(str(nxt), str(folder / "step-00000012")) == copy
    ledger = Ledger(folder)
    ledger.append(
        Adopted(job="7", attempt=0, in_place=1, node=0, step=12, source="7-0", save="7.0.0")
    )
    ledger.append(Serving(job="7", attempt=0, in_place=1, node="n0", host="h", port=1))
    assert salvage.gather(ledger, "7", AttemptId(0, 1), ["n0"], 10) == 12


def test_a_pull_cut_when_the_drained_node_goes_leaves_the_flush_to_the_folder(
    tmp_path: Path, folder: Path, said: list[str]
) -> None:
    runs, servers = _step(folder, tmp_path)
    servers[1].close()  # n1 removed before the pull
    assert _pull(folder, ("n0",)) is False
    (done,) = [r for r in Ledger(folder).records() if isinstance(r, PullDone)]
    assert not done.ok and done.why and done.why.startswith("node 0:")
    assert "waits for its flush to the checkpoint folder" in said[-1]
    assert not any(p.whole for p in local.parts(runs[0]))  # nothing half-pulled is kept
    servers[0].close()


def test_a_pull_that_cannot_start_before_the_deadline_is_given_up(
    folder: Path, said: list[str]
) -> None:
    Ledger(folder).append(Start(job="7", attempt=0, nodes=("n0", "n1"), num_nodes=2))
    pull = in_place.InPlacePull(Ledger(folder), "7", STEP, ("n0", "n1"), ("n0",))
    assert pull.poll(12, late=False) is None  # no node serves yet: wait
    assert pull.poll(12, late=True) is False
    assert "not every node of this step serves" in said[-1]


def test_a_spare_among_the_nodes_kept_means_no_pull(folder: Path, said: list[str]) -> None:
    pull = in_place.InPlacePull(Ledger(folder), "7", STEP, ("n0", "n1"), ("n0", "s1"))
    assert pull.poll(12, late=False) is False
    assert "spare(s) s1 hold no copy" in said[-1]
    assert not [r for r in Ledger(folder).records() if isinstance(r, PullAsked)]


def test_beside_a_spare_every_node_of_the_next_step_pulls_the_last_save(
    tmp_path: Path, folder: Path, said: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hot spare: the next step (in place 1) already runs beside this one on n0 and the
    spare s1; each of its nodes pulls this step's last save from n0 and n1 whole, and this
    step's nodes need not flush it (its PullDone is this step's)."""
    monkeypatch.setattr(serving, "SERVE_WAIT", 600.0)  # however slow the set-up below
    runs, servers = _step(folder, tmp_path)
    ledger = Ledger(folder)
    ledger.append(Notice(job="7", attempt=0, kind="drain", node="n1", reason="preempted",
                          seen_at=1.0, first=True, restart="in_place"))  # fmt: skip
    beside = AttemptId(0, 1)
    pull = in_place.InPlacePull(Ledger(folder), "7", STEP, ("n0", "n1"), ("n0", "s1"), True)
    assert pull.poll(12, late=False) is None  # the next step's nodes do not serve yet: wait
    assert not [r for r in ledger.records() if isinstance(r, PullAsked)]
    nxt = [tmp_path / "n0" / "7-0.1", tmp_path / "s1" / "7-0.1"]
    for node, run in enumerate(nxt):
        run.mkdir(parents=True)
        handoff.Puller(run, folder, Ledger(folder), job="7", attempt=0, in_place=1, node=node,
                       poll=0.05).start()  # fmt: skip
        ledger.append(Serving(job="7", attempt=0, in_place=1, node=("n0", "s1")[node],
                              host="127.0.0.1", port=1))  # fmt: skip
    wait_for("the pull's end", lambda: pull.poll(12, late=False) is not None, timeout=60)
    assert pull.result is True
    records = ledger.records()
    (asked,) = [r for r in records if isinstance(r, PullAsked)]
    assert (asked.attempt_id, asked.pullers, len(asked.sources)) == (beside, (0, 1), 2)
    (done,) = [r for r in records if isinstance(r, PullDone)]
    assert done.ok and done.attempt_id == STEP and done.predecessor == "7"
    assert not in_place.kept(records, "7", STEP, 12)  # until the restart is asked
    for run in nxt:
        (whole,) = local.parts(run)
        assert whole.whole and set(whole.files) == {"__0_0.distcp", "__1_0.distcp"}
    assert not any(p.whole for run in runs for p in local.parts(run))  # none pulled there
    assert said[-1].startswith("step 12 pulled onto the next step's node(s)")
    for server in servers:
        server.close()


def test_beside_a_spare_whose_nodes_never_serve_the_pull_is_given_up(
    tmp_path: Path, folder: Path, said: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, servers = _step(folder, tmp_path)
    pull = in_place.InPlacePull(Ledger(folder), "7", STEP, ("n0", "n1"), ("n0", "s1"), True)
    assert pull.poll(12, late=False) is None  # within serving.SERVE_WAIT: wait
    monkeypatch.setattr(serving, "SERVE_WAIT", -1.0)
    assert pull.poll(12, late=False) is False
    assert "the next step's node(s) could not pull step 12" in said[-1]
    assert "not every node of the next step serves" in said[-1]
    assert "this step ends once its flush has committed it" in said[-1]
    (done,) = [r for r in Ledger(folder).records() if isinstance(r, PullDone)]
    assert not done.ok and done.attempt_id == STEP
    for server in servers:
        server.close()


def _whole(run: Path, step: int, job: str = "7", nodes: int = 1) -> None:
    written = local.incoming(run, step, "x-")
    written.mkdir(parents=True)
    (written / "w").write_bytes(str(step).encode())
    local.seal(written, run, step, {"job": job, "node": 0, "nodes": nodes})


def test_only_whole_copies_of_the_jobs_own_newer_than_the_folder_are_taken_over(
    tmp_path: Path,
) -> None:
    node = tmp_path / "node"
    _whole(node / "7-0", 5)  # older than the folder's newest (6)
    _whole(node / "7-0.1", 9)  # newer: taken, the newest first
    _whole(node / "7-0.2", 8)
    _whole(node / "70-0", 11)  # job 70's, not job 7's
    run = node / "7-0.3"
    run.mkdir()
    taken = salvage.adopt(run, "7", newer_than=6)
    assert [(t.step, t.parts, t.source) for t in taken] == [(9, None, "7-0.1"), (8, None, "7-0.2")]
    assert [p.step for p in local.parts(run)] == [8, 9]
    assert [p.step for p in local.parts(node / "70-0")] == [11]
    assert salvage.adopt(node / "7-0.3", "7", newer_than=20) == []


def test_a_folder_whose_wrapper_still_lives_is_waited_for_then_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(salvage, "LOCKED_WAIT", 0.3)
    node = tmp_path / "node"
    _whole(node / "7-0", 9)
    fd = os.open(node / "7-0" / local.LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a step beside this one, still training
    run = node / "7-0.1"
    run.mkdir()
    assert salvage.adopt(run, "7", newer_than=0) == []
    os.close(fd)
    assert [t.step for t in salvage.adopt(run, "7", newer_than=0)] == [9]


def test_parts_of_two_saves_of_one_step_are_never_merged(tmp_path: Path) -> None:
    """Attempt 1 trained step 12 again after attempt 0 saved it: the later save's parts
    are taken, and never mixed with the earlier one's."""
    node = tmp_path / "node"
    for attempt, folder in ((0, "7-0"), (1, "7-1")):
        written = local.incoming(node / folder, 12, "x-")
        written.mkdir(parents=True)
        (written / f"__{attempt}.distcp").write_bytes(b"x")
        meta = {"job": "7", "attempt": attempt, "node": attempt, "nodes": 2}
        local.seal(written, node / folder, 12, meta)  # node 0's part of one, node 1's of the other
    run = node / "7-2"
    run.mkdir()
    (taken,) = salvage.adopt(run, "7", newer_than=0)
    assert (taken.save, taken.parts) == ("7.1.0", (1,))  # one part of the later save: not whole
    assert not local.parts(run)


def test_the_next_step_resumes_from_a_copy_only_when_every_node_took_the_same_over(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(handoff, "SERVE_WAIT", 0.3)
    ledger, at = Ledger(folder), AttemptId(1, 0)
    names = ["n0", "n1"]
    assert salvage.gather(ledger, "7", at, names, 10) is None  # no node serves
    ledger.append(Adopted(job="7", attempt=1, node=0, step=12, source="7-0", save="7.0.0"))
    for node in names:
        ledger.append(Serving(job="7", attempt=1, node=node, host="h", port=1))
    assert salvage.gather(ledger, "7", at, names, 12) is None  # the folder has it
    ledger.append(Adopted(job="7", attempt=1, node=1, step=12, source="7-0", save="7.0.1"))
    asked: list[tuple[int, tuple[str, ...], tuple[int, ...]]] = []

    def ask_pulls(ledger: Ledger, **kw: Any) -> bool:
        asked.append((kw["step"], tuple(kw["sources"]), kw["pullers"]))
        return False

    monkeypatch.setattr(handoff, "ask_pulls", ask_pulls)
    # Node 1's step 12 is another save than node 0's: not one step, each node must pull.
    assert salvage.gather(ledger, "7", at, names, 10) is None
    assert len(asked) == 1 and asked[0][2] in ((0,), (1,))  # one node pulls the other's
    monkeypatch.undo()
    ledger.append(Adopted(job="7", attempt=2, node=0, step=12, source="7-1", save="7.1.0"))
    ledger.append(Adopted(job="7", attempt=2, node=1, step=12, source="7-1", save="7.1.0"))
    for node in names:
        ledger.append(Serving(job="7", attempt=2, node=node, host="h", port=1))
    assert salvage.gather(ledger, "7", AttemptId(2, 0), names, 10) == 12


def test_a_step_whose_kept_nodes_hold_its_save_does_not_wait_for_its_flush(
    tmp_path: Path, folder: Path
) -> None:
    """Only the job's own pull in place after its notice, ok, of this step, covering the
    newest save, once the restart in place is asked; not a restart's gather at its start,
    nor a pull whose step then ended otherwise (the training finished its work instead)."""
    ledger = Ledger(folder)
    ledger.append(PullDone(job="7", attempt=0, predecessor="7", step=12, ok=True))
    assert not in_place.kept(ledger.records(), "7", STEP, 12)  # a gather's: no notice
    ledger.append(Notice(job="7", attempt=0, kind="drain", node="n1", reason="preempted",
                         seen_at=0.0, first=True, restart="in_place"))  # fmt: skip
    assert not in_place.kept(ledger.records(), "7", STEP, 12)  # before the notice
    ledger.append(PullDone(job="7", attempt=0, predecessor="7", step=12, ok=True))
    assert not in_place.kept(ledger.records(), "7", STEP, 12)  # no restart asked (yet)
    early = dict(job="7", attempt=0, keep=("n0", "s1"), release=("n1",), why="x")
    ledger.append(InPlaceRequested(**early, requested_at=1.0, early=True))  # type: ignore[arg-type]
    assert not in_place.kept(ledger.records(), "7", STEP, 12)  # beside a spare: at the notice
    ledger.append(InPlaceRequested(**early, requested_at=2.0))  # type: ignore[arg-type]
    records = ledger.records()
    assert in_place.kept(records, "7", STEP, 12) and in_place.kept(records, "7", STEP, 10)
    assert not in_place.kept(records, "7", STEP, 13)  # a newer save: not held
    assert not in_place.kept(records, "7", AttemptId(0, 1), 12)  # another step's
    ledger.append(PullDone(job="8", attempt=0, predecessor="7", step=20, ok=True))
    assert not in_place.kept(ledger.records(), "7", STEP, 20)  # a successor's: handed over


def test_a_later_ask_in_the_same_attempt_is_pulled_too(tmp_path: Path, folder: Path) -> None:
    """A successor's step pulled its predecessor's save at its start; when it restarts in
    place later, its puller answers that ask as well, and its own records do not stand
    for it."""
    runs, servers = _step(folder, tmp_path)
    ledger = Ledger(folder)
    ledger.append(PullAsked(job="7", attempt=0, predecessor="6", step=12,
                            sources=("127.0.0.1:1",), pullers=(0,)))  # fmt: skip
    wait_for("the first pull's end", lambda: any(
        isinstance(r, Pulled) and not r.ok for r in Ledger(folder).records()))  # fmt: skip
    assert _pull(folder, ("n0",)) is True
    (whole,) = [p for p in local.parts(runs[0]) if p.whole]
    assert whole.step == 12
    for server in servers:
        server.close()


def test_a_part_sealed_again_stays_for_a_transfer_under_way_then_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    _part(run, 12, {"a": b"1"}, node=0, nodes=2)
    _part(run, 12, {"a": b"1", "b": b"2"}, node=0, nodes=2)  # the whole copy, pulled
    (aside,) = [p for p in run.iterdir() if p.name.startswith(local.REPLACED)]
    assert (aside / "a").read_bytes() == b"1"  # a server may still be sending it
    local.prune(run)
    assert aside.exists()
    monkeypatch.setattr(local, "REPLACED_GRACE", 0.0)
    local.prune(run)
    assert not aside.exists() and [p.step for p in local.parts(run)] == [12]


def test_a_merge_that_fails_leaves_the_parts_as_they_were(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = tmp_path / "node"
    for n in range(2):
        _part(node / "7-0", 12, {f"__{n}.distcp": b"x" * 10}, node=n, nodes=2)
        if n == 0:
            (node / "7-0" / "step-00000012").rename(node / "7-0" / "replica-step-00000012-0")

    def full(*_: object, **__: object) -> Path:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(local, "seal", full)
    run = node / "7-1"
    run.mkdir()
    (taken,) = salvage.adopt(run, "7", newer_than=0)
    assert taken.parts == (0, 1)  # held as two parts, every byte still there
    held = sorted(p.name for p in run.iterdir() if p.name.startswith(salvage.HELD))
    assert held == ["held-step-00000012-0", "held-step-00000012-1"]
    assert (run / held[1] / "__1.distcp").read_bytes() == b"x" * 10
