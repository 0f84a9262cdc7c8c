"""The flush: node-local parts reach the checkpoint folder whole, committed by node 0
under the folder's rules; the newest goes, the ones between are skipped; a cut copy is
never chosen."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from slurmpre.folder import checkpoints
from slurmpre.folder.access import OWNER
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import Checkpoint
from slurmpre.tier import flush, local, replica

from tests.conftest import wait_for


def _seal(run: Path, step: int, files: dict[str, bytes], job: str = "9") -> None:
    written = local.incoming(run, step, f"{job}-0-n{step}")
    written.mkdir(parents=True)
    for rel, data in files.items():
        (written / rel).parent.mkdir(parents=True, exist_ok=True)
        (written / rel).write_bytes(data)
    local.seal(written, run, step, {"job": job, "attempt": 0, "seconds": 0.5})


def _flusher(run: Path, folder: Path, node: int = 0, nodes: int = 1) -> flush.Flusher:
    held = local.Held(run, os.open(run / local.LOCK, os.O_RDWR | os.O_CREAT, 0o600))
    return flush.Flusher(
        held, folder, tag="9-0-flush", node_id=node, nodes=nodes, access=OWNER
    ).start()


def _records(folder: Path) -> list[Checkpoint]:
    return [r for r in Ledger(folder).records() if isinstance(r, Checkpoint)]


def test_a_part_is_committed_in_the_folder_and_recorded(tmp_path: Path, folder: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    f = _flusher(run, folder)
    _seal(run, 4, {"model/w.bin": b"w" * 4096, "extra.json": b"{}"})
    (rec,) = wait_for("the flush's record", lambda: _records(folder) or None)
    assert rec.step == 4 and rec.seconds == 0.5 and rec.flush_seconds is not None
    found = checkpoints.latest(folder).checkpoint
    assert found is not None and found.step == 4 and found.reason  # complete by the rules
    assert (Path(rec.path) / "model/w.bin").read_bytes() == b"w" * 4096
    assert f.finish(30) and not run.exists()  # local copies go once durable
    assert not [p for p in folder.iterdir() if p.name.startswith(".sync")]


def test_saves_faster_than_the_flush_skip_to_the_newest(
    tmp_path: Path, folder: Path, said: list[str]
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    for step in (1, 2, 3):
        _seal(run, step, {"w": bytes([step]) * 100})
    f = _flusher(run, folder)
    wait_for("step 3 committed", lambda: _records(folder) or None)
    assert f.stop(30)
    assert [r.step for r in _records(folder)] == [3]
    assert "flush: steps 1, 2 skipped, step 3 is newer" in said
    assert not (folder / "step-00000001").exists()


def test_two_nodes_parts_make_one_checkpoint(tmp_path: Path, folder: Path) -> None:
    run0, run1 = tmp_path / "n0", tmp_path / "n1"
    run0.mkdir()
    run1.mkdir()
    lead = _flusher(run0, folder, node=0, nodes=2)
    other = _flusher(run1, folder, node=1, nodes=2)
    _seal(run0, 8, {"__0_0.distcp": b"a" * 300, ".metadata": b"m"})
    assert local.parts(run0)
    # Node 0 announces and copies its part, then waits for node 1's.
    _seal(run1, 8, {"__1_0.distcp": b"b" * 300})
    (rec,) = wait_for("the two-node commit", lambda: _records(folder) or None)
    names = sorted(p.name for p in Path(rec.path).iterdir())
    assert names == [".metadata", ".slurmpre-complete", "__0_0.distcp", "__1_0.distcp"]
    assert lead.stop(30) and other.stop(30)


def test_a_step_a_node_never_copies_is_skipped_for_a_newer_one(
    tmp_path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch, said: list[str]
) -> None:
    monkeypatch.setattr(flush, "POLL", 0.05)
    run0, run1 = tmp_path / "n0", tmp_path / "n1"
    run0.mkdir()
    run1.mkdir()
    lead = _flusher(run0, folder, node=0, nodes=2)
    _seal(run0, 5, {"a": b"a"})
    wait_for("step 5 announced", lambda: any(folder.glob(".incoming-step-00000005-*")) or None)
    _seal(run0, 6, {"a": b"a6"})  # node 1 never saved step 5: a newer step is due
    other = _flusher(run1, folder, node=1, nodes=2)
    _seal(run1, 6, {"b": b"b6"})
    (rec,) = wait_for("step 6 committed", lambda: _records(folder) or None)
    assert rec.step == 6
    assert any("step 5 skipped, 1 node(s) did not copy their part" in s for s in said)
    assert not list(folder.glob(".incoming-step-00000005-*"))  # never left to be found
    assert lead.stop(30) and other.stop(30)


def test_a_flush_cut_midway_is_never_chosen(
    tmp_path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch, said: list[str]
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    _seal(run, 1, {"w": b"1"})
    f = _flusher(run, folder)
    wait_for("step 1", lambda: _records(folder) or None)
    real = flush.copy_file
    copied: list[Path] = []

    def cut(src: Path, dest: Path, mode: int, **_: object) -> None:
        if copied:
            raise OSError(5, "Input/output error")  # the shared volume went away midway
        copied.append(dest)
        real(src, dest, mode)

    monkeypatch.setattr(flush, "copy_file", cut)
    _seal(run, 2, {"a": b"a" * 10, "b": b"b" * 10})
    wait_for("the flush to fail", lambda: f.error)
    assert "Input/output error" in str(f.error)
    assert checkpoints.latest(folder).checkpoint.step == 1  # type: ignore[union-attr]
    assert not list(folder.glob(".incoming-*")) and not list(folder.glob(".sync*"))
    assert any("the flush to the checkpoint folder failed, trying again" in s for s in said)
    # The local copy of step 2 stays (not durable); step 1's, in the folder, went before it.
    assert [p.step for p in local.parts(run)] == [2]
    monkeypatch.setattr(flush, "copy_file", real)  # the volume is back: tried again
    wait_for("step 2 committed", lambda: len(_records(folder)) == 2 or None)
    assert checkpoints.latest(folder).checkpoint.step == 2  # type: ignore[union-attr]
    assert f.stop(30)


def test_a_step_the_volume_keeps_refusing_is_given_up_and_stays_on_the_node(
    tmp_path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch, said: list[str]
) -> None:
    monkeypatch.setattr(flush, "RETRY", 0.01)
    monkeypatch.setattr(flush, "TRIES", 3)

    def refused(src: Path, dest: Path, mode: int, **_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(flush, "copy_file", refused)
    run = tmp_path / "run"
    run.mkdir()
    _seal(run, 7, {"w": b"w"})
    f = _flusher(run, folder)
    wait_for("the give-up", lambda: 7 in f.abandoned or None)
    assert not f.finish(30)  # the attempt's end does not wait for it any more...
    assert [p.step for p in local.parts(run)] == [7]  # ...and the only copy stays
    assert any(s.startswith("flush: step 7 given up after 3 failures") for s in said)
    assert checkpoints.latest(folder).checkpoint is None


def test_a_copy_cut_halfway_and_tried_again_commits_the_whole_file(
    tmp_path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Node 1's copy fails halfway through a file: what it wrote is never taken for the
    file (another node's, whole); tried again, the commit holds every byte."""
    monkeypatch.setattr(flush, "RETRY", 0.01)
    real, cuts = flush.copy_file, []

    def cut_once(src: Path, dest: Path, mode: int, **_: object) -> None:
        if src.name == "b.bin" and not cuts:
            cuts.append(dest)
            dest.write_bytes(src.read_bytes()[:500])  # half of it, then the volume fails
            raise OSError(5, "Input/output error")
        real(src, dest, mode)

    monkeypatch.setattr(flush, "copy_file", cut_once)
    run0, run1 = tmp_path / "n0", tmp_path / "n1"
    run0.mkdir()
    run1.mkdir()
    lead = _flusher(run0, folder, node=0, nodes=2)
    other = _flusher(run1, folder, node=1, nodes=2)
    _seal(run0, 3, {"a.bin": b"a" * 1000})
    _seal(run1, 3, {"b.bin": b"b" * 1000})
    (rec,) = wait_for("the commit", lambda: _records(folder) or None)
    assert cuts and (Path(rec.path) / "b.bin").read_bytes() == b"b" * 1000
    assert not [p for p in Path(rec.path).iterdir() if ".part-" in p.name]
    assert lead.finish(30) and other.finish(30)


def test_a_given_up_step_does_not_hide_an_older_save_still_due(
    tmp_path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step node 0 gave up on (a node never copied it) is no "newer step" for a save
    below it, and the attempt's end waits for that one."""
    monkeypatch.setattr(flush, "PEERS_WAIT", 0.3)
    run0 = tmp_path / "n0"
    run0.mkdir()
    _seal(run0, 9, {"a": b"9"})  # node 1 never has step 9
    lead = _flusher(run0, folder, node=0, nodes=2)
    wait_for("step 9 given up", lambda: 9 in lead.abandoned or None)
    run1 = tmp_path / "n1"
    run1.mkdir()
    other = _flusher(run1, folder, node=1, nodes=2)
    _seal(run0, 8, {"a": b"8"})
    _seal(run1, 8, {"b": b"8"})
    (rec,) = wait_for("step 8 committed", lambda: _records(folder) or None)
    assert rec.step == 8
    assert not lead.finish(30)  # step 9, the newest on node 0, is not in the folder: kept
    assert [p.step for p in local.parts(run0)] == [9]  # 8 is in the folder: one part kept
    assert other.finish(30)


def test_a_copy_pauses_while_the_training_saves_on_the_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The training waits for its save: while one is written on the node, the flush's
    copy sends nothing (the node's memory and disks go to the save), then goes on."""
    monkeypatch.setattr(flush, "CHUNK", 1000)
    src, dest = tmp_path / "src", tmp_path / "dest"
    src.write_bytes(os.urandom(5000))
    seen: list[int] = []

    def saving() -> bool:  # a save starts after two chunks and ends three looks later
        seen.append(dest.stat().st_size)
        return len(seen) in (3, 4, 5)

    flush.copy_file(src, dest, 0o600, give_way=saving)
    assert seen[2:6] == [2000, 2000, 2000, 2000], seen  # nothing sent while it saved
    assert dest.read_bytes() == src.read_bytes()


def test_the_flush_gives_way_to_a_save_in_flight_in_its_folder(
    tmp_path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[bool] = []

    def copy(src: Path, dest: Path, mode: int, give_way: object = None) -> None:
        assert callable(give_way)
        asked.append(give_way())
        (run / ".incoming-step-00000002-9-0-").mkdir(exist_ok=True)  # the next save starts
        asked.append(give_way())
        (run / ".incoming-step-00000002-9-0-").rmdir()
        dest.write_bytes(src.read_bytes())

    monkeypatch.setattr(flush, "copy_file", copy)
    run = tmp_path / "run"
    run.mkdir()
    _seal(run, 1, {"w": b"1"})
    f = _flusher(run, folder)
    wait_for("step 1", lambda: _records(folder) or None)
    assert asked == [False, True]
    assert f.stop(30)


def test_a_step_another_attempt_has_committed_is_not_copied_again(
    tmp_path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The step before, restarted in place, flushed the copy this step took over: on a
    slow volume it is not written a second time (and set aside as a duplicate)."""
    copied: list[Path] = []
    monkeypatch.setattr(flush, "copy_file", lambda src, dest, mode, **_: copied.append(dest))
    run = tmp_path / "run"
    run.mkdir()
    f = _flusher(run, folder)  # the folder is empty as it starts
    with checkpoints.writing(folder, 5) as incoming:
        (incoming / "w").write_bytes(b"5")
    _seal(run, 5, {"w": b"5"})
    assert f.finish(30) and not copied
    assert not [p for p in folder.iterdir() if "duplicate" in p.name]


def test_the_step_whose_neighbours_part_is_kept_here_keeps_its_own_part_too(
    tmp_path: Path, folder: Path
) -> None:
    """Node 1 sealed step 15, but still keeps only node 0's part of step 10: its own part
    of step 10 stays, so that with node 0 lost step 10 is still whole here."""
    run = tmp_path / "run"
    for step in (10, 15):
        written = local.incoming(run, step, "9-0-")
        written.mkdir(parents=True)
        (written / "__1.distcp").write_bytes(b"1")
        local.seal(written, run, step, {"job": "9", "node": 1, "nodes": 2})
    other = tmp_path / "node0"
    written = local.incoming(other, 10, "9-0-")
    written.mkdir(parents=True)
    (written / "__0.distcp").write_bytes(b"0")
    sealed = local.seal(written, other, 10, {"job": "9", "node": 0, "nodes": 2})
    sealed.rename(run / replica.replica_name(10, 0))  # node 0's part, as a pull leaves it
    held = local.Held(run, os.open(run / local.LOCK, os.O_RDWR | os.O_CREAT, 0o600))
    f = flush.Flusher(held, folder, tag="9-0-flush", node_id=1, nodes=2, access=OWNER)
    f._cycle()
    assert [p.step for p in local.parts(run)] == [10, 15]


def test_a_part_already_in_the_folder_goes_before_the_next_flush_not_after_it(
    tmp_path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A flush of a big state takes minutes; the part before it, already in the folder,
    went only at its end, so a notice save then made three copies on the node (the
    big-state bench's 1-node scene: steps 200, 400 and 403 in RAM, 2.94x)."""
    run = tmp_path / "run"
    run.mkdir()
    _seal(run, 1, {"w": b"1"})
    f = _flusher(run, folder)
    wait_for("step 1 in the folder", lambda: _records(folder) or None)
    real, copying, go_on = flush.copy_file, threading.Event(), threading.Event()

    def slow(src: Path, dest: Path, mode: int, **kw: object) -> None:
        copying.set()
        go_on.wait(30)
        real(src, dest, mode)

    monkeypatch.setattr(flush, "copy_file", slow)
    _seal(run, 2, {"w": b"2"})
    wait_for("step 2's copy to begin", lambda: copying.is_set() or None)
    assert [p.step for p in local.parts(run)] == [2]
    go_on.set()
    wait_for("step 2 committed", lambda: len(_records(folder)) == 2 or None)
    assert f.stop(30)
