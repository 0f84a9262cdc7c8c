"""The hand-over over the network, in one process: a successor's nodes pull the
predecessor's after-notice save from its nodes' servers and every node resumes from its
own copy; a pull that fails leaves nothing and names why, and the folder is used."""

from __future__ import annotations

import json
import socket
import stat
from pathlib import Path
from typing import Any

import pytest
from slurmpre.errors import TransferError
from slurmpre.folder import trust
from slurmpre.folder.layout import FolderLayout
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import End, PullDone, Saved, Serving, Start
from slurmpre.tier import handoff, local, transfer


def _part(run: Path, step: int, files: dict[str, bytes], node: int = 0, nodes: int = 1) -> None:
    written = local.incoming(run, step, "7-0-n1")
    written.mkdir(parents=True)
    for rel, data in files.items():
        (written / rel).write_bytes(data)
    meta = {"job": "7", "attempt": 0, "seconds": 0.1, "node": node, "nodes": nodes}
    local.seal(written, run, step, meta)


def _serving(folder: Path, job: str, nodes: int) -> None:
    """The successor's nodes are up, each with its tier (a server, a puller)."""
    for node in range(nodes):
        Ledger(folder).append(
            Serving(job=job, attempt=0, node=f"new{node}", host="127.0.0.1", port=1)
        )


def test_the_runs_key_is_made_once_and_the_owners_alone(folder: Path) -> None:
    key = handoff.run_key(folder)
    assert len(key) == transfer.KEY_BYTES and handoff.run_key(folder) == key
    path = FolderLayout(folder).tier_key
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    path.chmod(0o620)  # the group could have written it: no key
    with pytest.raises(trust.Untrusted):
        handoff.run_key(folder)


def test_a_link_in_place_of_the_key_is_refused(folder: Path, tmp_path: Path) -> None:
    theirs = tmp_path / "theirs.key"
    theirs.write_text("00" * transfer.KEY_BYTES)
    theirs.chmod(0o600)
    FolderLayout(folder).tier_key.symlink_to(theirs)
    with pytest.raises(trust.Untrusted):
        handoff.run_key(folder)


def _predecessor(folder: Path, runs: list[Path], step: int) -> list[transfer.Server]:
    """Job 7 saved ``step`` on its nodes after its notice, served them, and its training ended."""
    ledger, servers = Ledger(folder), []
    for node, run in enumerate(runs):
        server = transfer.Server(run, handoff.run_key(folder)).start()
        servers.append(server)
        ledger.append(
            Serving(job="7", attempt=0, node=f"n{node}", host="127.0.0.1", port=server.port)
        )
    names = tuple(f"n{node}" for node in range(len(runs)))
    ledger.append(
        Start(
            job="7",
            attempt=0,
            nodes=names,
            num_nodes=len(runs),
            world_size=len(runs),
            resume_from=None,
            step=None,
        )
    )
    ledger.append(
        Saved(job="7", attempt=0, step=step, path=str(runs[0]), seconds=0.2, after_notice=True)
    )
    ledger.append(End(job="7", attempt=0, exit_code=0, seconds=10.0))
    return servers


def test_every_node_of_the_successor_holds_the_predecessors_save(
    tmp_path: Path, folder: Path, said: list[str]
) -> None:
    old = [tmp_path / "old0", tmp_path / "old1"]
    for run in old:
        run.mkdir()
    _part(old[0], 12, {"__0_0.distcp": b"a" * 5000, ".metadata": b"m"}, node=0, nodes=2)
    _part(old[1], 12, {"__1_0.distcp": b"b" * 7000}, node=1, nodes=2)
    servers = _predecessor(folder, old, 12)
    new = [tmp_path / "new0", tmp_path / "new1"]
    pullers = []
    for node, run in enumerate(new):
        run.mkdir()
        pullers.append(
            handoff.Puller(run, folder, Ledger(folder), job="8", attempt=0, node=node).start()
        )
    _serving(folder, "8", 2)
    step = handoff.arrange(
        Ledger(folder),
        job="8",
        attempt=0,
        predecessor="7",
        nodes=2,
        durable=lambda: 10,
        ended=lambda: False,
        timeout=60,
    )
    assert step == 12
    for run in new:
        (part,) = local.parts(run)
        assert part.files == {".metadata": 1, "__0_0.distcp": 5000, "__1_0.distcp": 7000}
        assert (part.path / "__1_0.distcp").read_bytes() == b"b" * 7000
        assert local.nearest(str(run), str(folder / "step-00000012")) == str(part.path)
        assert not [p for p in run.iterdir() if p.name.startswith(".")]
    assert handoff.pulled_by_successor(Ledger(folder).records(), "7", 12)
    assert said and said[0].startswith("step 12 pulled from job 7's nodes:")
    for server in servers:
        server.close()


def test_a_pull_that_fails_resumes_from_the_folder_and_says_why(
    tmp_path: Path, folder: Path, said: list[str]
) -> None:
    old = tmp_path / "old"
    old.mkdir()
    _part(old, 5, {"w": b"w" * 100})
    (server,) = _predecessor(folder, [old], 5)
    server.close()  # the node went before the successor could pull
    new = tmp_path / "new"
    new.mkdir()
    handoff.Puller(new, folder, Ledger(folder), job="8", attempt=0, node=0).start()
    _serving(folder, "8", 1)
    step = handoff.arrange(
        Ledger(folder),
        job="8",
        attempt=0,
        predecessor="7",
        nodes=1,
        durable=lambda: 3,
        ended=lambda: False,
        timeout=60,
    )
    assert step is None
    (done,) = [r for r in Ledger(folder).records() if isinstance(r, PullDone)]
    assert not done.ok and done.why and "node 0" in done.why
    assert len(said) == 1 and "resuming from the newest checkpoint in the folder" in said[0]
    assert local.parts(new) == [] and list(new.iterdir()) == []  # nothing half-pulled
    assert not handoff.pulled_by_successor(Ledger(folder).records(), "7", 5)


def test_a_pull_cut_midway_resumes_from_the_folder_said_in_one_line(
    tmp_path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch, said: list[str]
) -> None:
    """The predecessor's node removed during the transfer (bench/big_state.py's ``1 node,
    pull cut midway``): its server sends half a file and its connection ends. The job's
    output says so once (node 0, quoting its puller's why), and nothing is kept."""
    old = tmp_path / "old"
    old.mkdir()
    _part(old, 5, {"w": b"w" * 100_000})
    send = transfer._send_file

    def removed(conn: socket.socket, folder: int, rel: str, size: int, *rest: Any) -> None:
        if rel != "w":
            return send(conn, folder, rel, size, *rest)
        conn.sendall(b"w" * (size // 2))
        raise OSError("the node is gone")

    monkeypatch.setattr(transfer, "_send_file", removed)
    servers = _predecessor(folder, [old], 5)
    new = tmp_path / "new"
    new.mkdir()
    puller = handoff.Puller(new, folder, Ledger(folder), job="8", attempt=0, node=0).start()
    _serving(folder, "8", 1)
    step = handoff.arrange(Ledger(folder), job="8", attempt=0, predecessor="7", nodes=1,
                           durable=lambda: 3, ended=lambda: False, timeout=60)  # fmt: skip
    puller.stop()
    servers[0].close()
    assert step is None
    (done,) = [r for r in Ledger(folder).records() if isinstance(r, PullDone)]
    assert not done.ok and done.why and "ended within 'w'" in done.why
    assert len(said) == 1, said
    assert "failed" in said[0] and "ended within 'w'" in said[0]
    assert said[0].endswith("resuming from the newest checkpoint in the folder")
    assert list(new.iterdir()) == []  # nothing half-pulled


def test_a_save_older_than_the_folders_newest_is_not_pulled(tmp_path: Path, folder: Path) -> None:
    old = tmp_path / "old"
    old.mkdir()
    _part(old, 5, {"w": b"w"})
    (server,) = _predecessor(folder, [old], 5)
    step = handoff.arrange(
        Ledger(folder),
        job="8",
        attempt=0,
        predecessor="7",
        nodes=1,
        durable=lambda: 6,
        ended=lambda: False,
        timeout=60,
    )
    assert step is None
    server.close()


def test_a_predecessor_that_ends_without_serving_is_not_waited_for(folder: Path) -> None:
    step = handoff.arrange(
        Ledger(folder),
        job="8",
        attempt=0,
        predecessor="7",
        nodes=1,
        durable=lambda: None,
        ended=lambda: True,
        timeout=60,
    )
    assert step is None


def test_a_pull_missing_a_nodes_part_is_never_resumed_from(tmp_path: Path, folder: Path) -> None:
    """The save had two nodes, one serves: node 0's part alone is no checkpoint."""
    old = tmp_path / "old"
    old.mkdir()
    _part(old, 6, {"__0_0.distcp": b"a"}, node=0, nodes=2)
    with transfer.Server(old, handoff.run_key(folder)) as server:
        new = tmp_path / "new"
        new.mkdir()
        with pytest.raises(TransferError, match=r"the parts of node\(s\) \[0\] of 2, not every"):
            handoff.pull_all([f"127.0.0.1:{server.port}"], handoff.run_key(folder), 6, new)
    assert list(new.iterdir()) == []


def test_a_part_naming_a_file_outside_its_folder_is_no_part(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (tmp_path / "victim").write_bytes(b"1234")
    _part(run, 2, {"w": b"1"})
    seal = run / "step-00000002" / local.PART
    meta = json.loads(seal.read_text())
    meta["files"]["../../victim"] = 4
    seal.write_text(json.dumps(meta))
    assert local.parts(run) == [] and (tmp_path / "victim").read_bytes() == b"1234"


def test_a_copy_whose_files_changed_is_not_resumed_from(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    _part(run, 4, {"w": b"1234"})
    durable = str(tmp_path / "ckpt" / "step-00000004")
    assert local.nearest(str(run), durable) == str(run / "step-00000004")
    (run / "step-00000004" / "w").write_bytes(b"12")
    assert local.nearest(str(run), durable) == durable
    assert local.nearest(None, durable) == durable
    assert local.nearest(str(run), str(tmp_path / "checkpoint-4")) == str(tmp_path / "checkpoint-4")


def test_one_nodes_part_of_a_bigger_save_is_not_resumed_from(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    _part(run, 4, {"w": b"1234"}, node=0, nodes=2)  # its own part; node 1's is elsewhere
    durable = str(tmp_path / "ckpt" / "step-00000004")
    assert local.nearest(str(run), durable) == durable
