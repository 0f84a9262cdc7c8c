"""A node lost without notice, in one process: each node keeps its neighbour's newest
part beside its own (`replica`), so the attempt that follows, started on nodes that
held some of them, takes over what is left there (`salvage.adopt`), pulls among its
nodes what each lacks (`salvage.gather`), and resumes from the newest step they hold
between them; with a part missing everywhere, the folder."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import Adopted, AttemptId, Replicated, Serving, Start
from slurmpre.tier import handoff, local, replica, salvage, transfer

from tests.conftest import wait_for


class Attempt:
    """Attempt ``attempt`` of job 7 on ``names`` (node dirs under ``root``): each node's
    folder, server, puller, and (``replicate``) replicator, as its wrapper runs them."""

    def __init__(
        self, root: Path, folder: Path, attempt: int, names: list[str], replicate: bool = False
    ) -> None:
        self.runs, self.servers, self.ledger = [], [], Ledger(folder)
        self.at, self.names, self.stops = AttemptId(attempt), names, list[object]()
        self.taken: list[salvage.Taken | None] = []
        self.ledger.append(
            Start(job="7", attempt=attempt, nodes=tuple(names), num_nodes=len(names))
        )
        for node, name in enumerate(names):
            run = root / name / f"7-{attempt}"
            run.mkdir(parents=True)
            taken = salvage.adopt(run, "7", newer_than=10) if attempt else []
            self.taken.append(taken[0] if taken else None)
            for t in taken:
                self.ledger.append(Adopted(job="7", attempt=attempt, node=node, step=t.step,
                                           source=t.source, parts=t.parts, nodes=t.nodes,
                                           save=t.save))  # fmt: skip
            server = transfer.Server(run, handoff.run_key(folder)).start()
            self.ledger.append(Serving(job="7", attempt=attempt, node=name, host="127.0.0.1",
                                       port=server.port))  # fmt: skip
            self.stops.append(handoff.Puller(run, folder, Ledger(folder), job="7",
                                             attempt=attempt, node=node,
                                             poll=0.05).start())  # fmt: skip
            if replicate:
                self.stops.append(
                    replica.Replicator(
                        run, Ledger(folder), job="7", at=self.at, node=node, nodes=len(names)
                    ).start()
                )
            self.runs.append(run)
            self.servers.append(server)

    def save(self, step: int) -> None:
        """Every node seals its part of ``step`` (node i writes __i_0.distcp)."""
        for node, run in enumerate(self.runs):
            written = local.incoming(run, step, "7-0-")
            written.mkdir(parents=True)
            (written / f"__{node}_0.distcp").write_bytes(bytes([65 + node]) * (1000 + node))
            local.seal(written, run, step, {"job": "7", "node": node, "nodes": len(self.runs)})

    def lose(self, node: int) -> None:
        """The machine is gone: its server, and its RAM."""
        self.servers[node].close()
        shutil.rmtree(self.runs[node].parent)

    def end(self) -> None:
        for server in self.servers:
            server.close()
        for stop in self.stops:
            stop.stop()  # type: ignore[attr-defined]


def _replicated(folder: Path, step: int, nodes: int) -> bool:
    done = {
        r.node for r in Ledger(folder).records() if isinstance(r, Replicated) and r.step == step
    }
    return len(done) == nodes


@pytest.fixture(autouse=True)
def _replicas_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replica, "POLL", 0.05)


def _saved_then_lost(tmp_path: Path, folder: Path, names: list[str], lost: list[int]) -> Attempt:
    """Attempt 0 on ``names`` saves step 12, each node keeps its neighbour's part, then the
    nodes ``lost`` go with no notice and the job with them: no wrapper serves any more."""
    first = Attempt(tmp_path, folder, 0, names, replicate=True)
    first.save(12)
    wait_for("every node's replica", lambda: _replicated(folder, 12, len(names)))
    for node in lost:
        first.lose(node)
    first.end()
    return first


def test_two_nodes_one_lost_the_survivor_holds_the_step_and_the_new_node_pulls_it(
    tmp_path: Path, folder: Path, said: list[str]
) -> None:
    first = _saved_then_lost(tmp_path, folder, ["n0", "n1"], lost=[1])
    (kept,) = replica.replicas(first.runs[0])
    assert kept.meta["node"] == 1 and kept.path.name == "replica-step-00000012-1"
    second = Attempt(tmp_path, folder, 1, ["n0", "n2"])  # requeued: the survivor and a new node
    assert second.taken == [salvage.Taken(12, 2, None, "7-0", "7.0.0"), None]  # whole on n0
    step = salvage.gather(second.ledger, "7", AttemptId(1), ["n0", "n2"], 10)
    assert step == 12, said
    for run in second.runs:
        (part,) = local.parts(run)
        assert part.whole and set(part.files) == {"__0_0.distcp", "__1_0.distcp"}
        assert (part.path / "__1_0.distcp").read_bytes() == b"B" * 1001
    second.end()


def test_three_nodes_one_lost_the_survivors_hold_every_part_between_them(
    tmp_path: Path, folder: Path, said: list[str]
) -> None:
    _saved_then_lost(tmp_path, folder, ["n0", "n1", "n2"], lost=[1])
    second = Attempt(tmp_path, folder, 1, ["n0", "n2"])
    assert [t.parts if t else None for t in second.taken] == [(0, 2), (1, 2)]
    assert salvage.gather(second.ledger, "7", AttemptId(1), ["n0", "n2"], 10) == 12
    for run in second.runs:
        whole = [p for p in local.parts(run) if p.whole]
        assert [p.step for p in whole] == [12]
        assert set(whole[0].files) == {"__0_0.distcp", "__1_0.distcp", "__2_0.distcp"}
    assert said[-1].startswith("step 12 pulled from this attempt's nodes")
    second.end()


def test_a_part_that_no_node_holds_any_more_leaves_the_folder(
    tmp_path: Path, folder: Path, said: list[str]
) -> None:
    """Two neighbours lost at once: node 1's part was on nodes 1 and 2 only."""
    _saved_then_lost(tmp_path, folder, ["n0", "n1", "n2"], lost=[1, 2])
    second = Attempt(tmp_path, folder, 1, ["n0", "n3"])
    assert salvage.gather(second.ledger, "7", AttemptId(1), ["n0", "n3"], 10) is None
    assert "hold only some parts of step 12" in said[-1]
    second.end()
