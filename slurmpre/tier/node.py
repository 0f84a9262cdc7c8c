"""What the tier runs beside one node's attempt, in its wrapper: the flush of this
node's local checkpoints, the server a successor pulls them from, and, in a successor,
the pull node 0 asks for. Started before the training (the server and the pull on a
thread of their own, off the way to the launch), finished after it."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurmpre.errors import SlurmpreError
from slurmpre.folder.access import Access
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import Adopted, AttemptId
from slurmpre.signals import quiet_thread
from slurmpre.tier import in_place, local
from slurmpre.tier.flush import Flusher
from slurmpre.tier.replica import Replicator

LOG = logging.getLogger(__name__)

if TYPE_CHECKING:
    from slurmpre.tier.handoff import Puller
    from slurmpre.tier.transfer import Server

FLUSH_WAIT = 3600.0  # seconds an attempt's end waits for its newest checkpoint to leave
SERVE_GRACE = 30.0  # seconds a job that handed over serves a flushed save to its successor


@dataclass(frozen=True)
class Attempt:
    """Who runs on this node: the job, its attempt, and this node's place in it."""

    job: str
    attempt: int
    in_place: int
    prefix: str  # every in-flight name this attempt writes starts with it
    node_id: int
    node_name: str
    nodes: int
    predecessor: str | None  # the job this one takes over from, in a successor
    adopts: bool = False  # a restart (not beside a step that trains): takes copies over


@dataclass
class NodeTier:
    flusher: Flusher
    ledger: Ledger
    attempt: Attempt
    server: Server | None = None
    puller: Puller | None = None
    replicator: Replicator | None = None
    _up: threading.Event = field(default_factory=threading.Event)

    @property
    def run(self) -> Path:
        return self.flusher.run

    @classmethod
    def start(
        cls,
        setting: str | None,
        env: Mapping[str, str],
        ledger: Ledger,
        at: Attempt,
        access: Access,
    ) -> NodeTier | None:
        """The tier on this node, when the spec's ``local_dir`` names a folder it can use
        (else None, said in one line when it named one)."""
        flusher = Flusher.for_node(
            setting, env, ledger.folder, node=at.node_name, attempt=at.prefix.rstrip("-"),
            adopt_job=at.job if at.adopts else None, tag=f"{at.prefix}flush",
            node_id=at.node_id, nodes=at.nodes, access=access,
        )  # fmt: skip
        if flusher is None:
            return None
        tier = cls(flusher, ledger, at)
        for taken in flusher.adopted:
            what = "a whole copy" if taken.parts is None else f"the parts of nodes {taken.parts}"
            LOG.info(f"took over {what} of step {taken.step} from {taken.source} on this node")
            with contextlib.suppress(SlurmpreError):
                ledger.append(Adopted(job=at.job, attempt=at.attempt, in_place=at.in_place,
                                      node=at.node_id, step=taken.step, source=taken.source,
                                      parts=taken.parts, nodes=taken.nodes,
                                      save=taken.save))  # fmt: skip
        quiet_thread(tier._serve, name="slurmpre-serve")
        return tier

    def _serve(self) -> None:
        from slurmpre.tier import handoff  # HMAC and sockets, off the way to the launch

        at = self.attempt

        def record(kind: Any, **fields: object) -> None:
            self.ledger.append(kind(job=at.job, attempt=at.attempt, in_place=at.in_place, **fields))

        try:
            self.server = handoff.serve(self.run, self.ledger.folder, record, at.node_name)
            # A successor's nodes pull its predecessor's save; any step's kept nodes pull
            # its own notice save when it restarts in place (`tier.in_place`).
            successor = bool(at.predecessor) and at.attempt == 0 and at.in_place == 0
            self.puller = handoff.Puller(
                self.run, self.ledger.folder, self.ledger, job=at.job, attempt=at.attempt,
                node=at.node_id, in_place=at.in_place,
                poll=handoff.POLL if successor else 1.0,
            ).start()  # fmt: skip
            if self.server is not None and at.nodes > 1:  # a copy on the neighbour's node
                self.replicator = Replicator(
                    self.run, self.ledger, job=at.job, at=AttemptId(at.attempt, at.in_place),
                    node=at.node_id, nodes=at.nodes,
                ).start()  # fmt: skip
        finally:
            self._up.set()

    def finish(self, timeout: float = FLUSH_WAIT) -> None:
        """The newest local checkpoint leaves this node before the wrapper exits: into
        the checkpoint folder, or to the job that took over (which then flushes it)."""
        from slurmpre.tier import handoff

        self._up.wait(60)
        if self.replicator is not None:
            self.replicator.stop()
        held = local.parts(self.run)
        newest = held[-1].step if held else None
        at = self.attempt
        this = AttemptId(at.attempt, at.in_place)

        def kept() -> bool:  # restarted in place: the nodes kept hold it whole
            records = self.ledger.records()
            return newest is not None and in_place.kept(records, at.job, this, newest)

        def handed() -> bool:  # a successor holds it
            return newest is not None and handoff.pulled_by_successor(
                self.ledger.records(), self.attempt.job, newest
            )

        done = False
        if not kept():
            if not self.flusher.settled():
                LOG.info("waiting for the newest checkpoint to leave this node")
            done = self.flusher.stop(timeout, lambda: handed() or kept())
        if kept():
            # The next step takes it over from the kept nodes' folders (or, started beside
            # this one on a spare, pulled it into its own), and its flush commits it:
            # nothing waits for this one's, and nothing is removed.
            LOG.info(f"step {newest} is held by the nodes that go on: the next step takes it")
            self._close()
            self.flusher.abandon()
            return
        if done and not handed() and self.server is not None and newest is not None:
            # Its notice save is in the folder already: serve it a little longer all the
            # same, to a successor that pulls it (RAM to RAM beats reading it back).
            handoff.await_taker(self.ledger, at.job, at.attempt, newest, SERVE_GRACE)
        self._close()
        self.flusher.finish(0.0, handed)

    def _close(self) -> None:
        """Stop serving and pulling (a pull asked of this node may run until here: a kept
        node pulls its step's notice save after that step's training has ended)."""
        if self.server is not None:
            self.server.close()
        if self.puller is not None:
            self.puller.stop()
