"""A step restarted in place with the node-local tier, in one process: the nodes it keeps
pull its notice save before the drained node goes, and the next step takes that copy
over from their folders; a pull that fails, or comes too late, says so and leaves the
flush to the folder; only a whole copy of the job's own is ever taken over."""

from __future__ import annotations

from pathlib import Path

import pytest
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import Adopted, AttemptId, PullAsked, PullDone, Serving, Start
from slurmpre.tier import handoff, in_place, local, salvage, transfer

from tests.conftest import wait_for

STEP = AttemptId(0, 0)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    out = tmp_path / "ckpt"
    out.mkdir()
    Ledger(out).ensure()
    return out


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
                       say=print, poll=0.05).start()  # fmt: skip
        runs.append(run)
        servers.append(server)
    return runs, servers


def _pull(folder: Path, keep: tuple[str, ...], said: list[str]) -> bool:
    pull = in_place.InPlacePull(Ledger(folder), "7", STEP, ("n0", "n1"), keep, said.append)
    wait_for("the pull's end", lambda: pull.poll(12, late=False) is not None, timeout=60)
    return bool(pull.result)


def test_the_kept_node_pulls_the_save_whole_and_the_next_step_takes_it_over(
    tmp_path: Path, folder: Path
) -> None:
    runs, servers = _step(folder, tmp_path)
    said: list[str] = []
    assert _pull(folder, ("n0",), said) is True  # n1 drained: n0 is kept
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
    assert taken == salvage.Taken(12, 2, None, "7-0") and not local.parts(runs[0])
    assert (nxt / "step-00000012" / "__1_0.distcp").read_bytes() == b"b" * 5000
    copy = str(nxt / "step-00000012")
    assert local.nearest(str(nxt), str(folder / "step-00000012")) == copy
    ledger = Ledger(folder)
    ledger.append(Adopted(job="7", attempt=0, in_place=1, node=0, step=12, source="7-0"))
    ledger.append(Serving(job="7", attempt=0, in_place=1, node="n0", host="h", port=1))
    assert salvage.gather(ledger, "7", AttemptId(0, 1), ["n0"], 10, said.append) == 12


def test_a_pull_cut_when_the_drained_node_goes_leaves_the_flush_to_the_folder(
    tmp_path: Path, folder: Path
) -> None:
    runs, servers = _step(folder, tmp_path)
    servers[1].close()  # n1 removed before the pull
    said: list[str] = []
    assert _pull(folder, ("n0",), said) is False
    (done,) = [r for r in Ledger(folder).records() if isinstance(r, PullDone)]
    assert not done.ok and done.why and done.why.startswith("node 0:")
    assert "waits for its flush to the checkpoint folder" in said[-1]
    assert not any(p.whole for p in local.parts(runs[0]))  # nothing half-pulled is kept
    servers[0].close()


def test_a_pull_that_cannot_start_before_the_deadline_is_given_up(folder: Path) -> None:
    Ledger(folder).append(Start(job="7", attempt=0, nodes=("n0", "n1"), num_nodes=2))
    said: list[str] = []
    pull = in_place.InPlacePull(Ledger(folder), "7", STEP, ("n0", "n1"), ("n0",), said.append)
    assert pull.poll(12, late=False) is None  # no node serves yet: wait
    assert pull.poll(12, late=True) is False
    assert "not every node of this step serves" in said[-1]


def test_a_spare_among_the_nodes_kept_means_no_pull(folder: Path) -> None:
    said: list[str] = []
    pull = in_place.InPlacePull(Ledger(folder), "7", STEP, ("n0", "n1"), ("n0", "s1"), said.append)
    assert pull.poll(12, late=False) is False
    assert "spare(s) s1 hold no copy" in said[-1]
    assert not [r for r in Ledger(folder).records() if isinstance(r, PullAsked)]


def _whole(run: Path, step: int, job: str = "7", nodes: int = 1) -> None:
    written = local.incoming(run, step, "x-")
    written.mkdir(parents=True)
    (written / "w").write_bytes(str(step).encode())
    local.seal(written, run, step, {"job": job, "node": 0, "nodes": nodes})


def test_only_a_whole_copy_of_the_jobs_own_newer_than_the_folder_is_taken_over(
    tmp_path: Path,
) -> None:
    node = tmp_path / "node"
    _whole(node / "7-0", 5)  # older than the folder's newest (6)
    _whole(node / "7-0.1", 9)  # the newest of the job's own: taken
    _whole(node / "7-0.2", 8)
    _whole(node / "70-0", 11)  # job 70's, not job 7's
    run = node / "7-0.3"
    run.mkdir()
    assert salvage.adopt(run, "7", newer_than=6) == salvage.Taken(9, 1, None, "7-0.1")
    assert [p.step for p in local.parts(run)] == [9]
    assert [p.step for p in local.parts(node / "70-0")] == [11]
    assert salvage.adopt(node / "7-0.3", "7", newer_than=20) is None


def test_the_next_step_resumes_from_a_copy_only_when_every_node_took_the_same_over(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(handoff, "SERVE_WAIT", 0.3)
    ledger, at, said = Ledger(folder), AttemptId(1, 0), list[str]()
    names = ["n0", "n1"]
    assert salvage.gather(ledger, "7", at, names, 10, said.append) is None  # no node serves
    ledger.append(Adopted(job="7", attempt=1, node=0, step=12, source="7-0"))
    for node in names:
        ledger.append(Serving(job="7", attempt=1, node=node, host="h", port=1))
    assert salvage.gather(ledger, "7", at, names, 12, said.append) is None  # the folder has it
    ledger.append(Adopted(job="7", attempt=1, node=1, step=12, source="7-0"))
    assert salvage.gather(ledger, "7", at, names, 10, said.append) == 12
