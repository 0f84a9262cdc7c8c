"""A copy that survives a node lost without notice: each node keeps, beside its own part
of the newest checkpoint, the part of the node before it (docs/local-tier.md, 5), in
``replica-<step>-<node>``: served and kept like a part, never taken for this node's own.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import threading
from collections.abc import Sequence
from pathlib import Path

from slurmpre.errors import SlurmpreError
from slurmpre.folder.layout import step_dir_name
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import AttemptId, Record, Replicated
from slurmpre.signals import quiet_thread
from slurmpre.tier import local
from slurmpre.tier import serving as where

LOG = logging.getLogger(__name__)

POLL = 1.0  # seconds between looks for a newer part of this node's own
PREFIX = "replica-"


def replica_name(step: int, node: int) -> str:
    return f"{PREFIX}{step_dir_name(step)}-{node}"


def replicas(run: Path) -> list[local.Part]:
    """The neighbours' parts this node keeps, oldest first."""
    return local.parts(run, PREFIX, named=False)


def source(records: Sequence[Record], job: str, at: AttemptId, node: int) -> str | None:
    """Where node ``node`` of attempt ``at`` serves (host:port), once it does."""
    nodes = where.nodes_of(records, job, at)
    if nodes is None or node >= len(nodes):
        return None
    return where.serving(records, job, at).get(nodes[node])


class Replicator:
    """One node's copy of its neighbour's newest part, kept up on a thread of the wrapper."""

    def __init__(
        self,
        run: Path,
        ledger: Ledger,
        *,
        job: str,
        at: AttemptId,
        node: int,
        nodes: int,
    ) -> None:
        self.run, self.ledger, self.job, self.at = run, ledger, job, at
        self.node, self.of = node, (node - 1) % nodes
        self.done = -1  # the newest step whose neighbour's part this node holds
        self._stop = threading.Event()
        self._said: str | None = None

    def start(self) -> Replicator:
        quiet_thread(self._loop, name="slurmpre-replica")
        return self

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        from slurmpre.tier import handoff, transfer  # sockets and HMAC: off the way to the launch

        key: bytes | None = None
        while not self._stop.wait(POLL):
            own = [p for p in local.parts(self.run) if p.meta.get("node") == self.node]
            if not own or own[-1].step <= self.done:
                continue
            step = own[-1].step
            dest = self.run / replica_name(step, self.of)
            try:
                where = source(self.ledger.records(), self.job, self.at, self.of)
                if where is None:
                    continue
                host, _, port = where.rpartition(":")
                key = key or handoff.run_key(self.ledger.folder)
                shutil.rmtree(dest, ignore_errors=True)
                got = transfer.pull(host, int(port), key, step_dir_name(step), dest)
                part = local.read_part(dest, named=False)
                if part is not None and part.step == step and part.whole:
                    shutil.rmtree(dest, ignore_errors=True)  # every node holds it whole now
                    self.done = step
                    continue
                if part is None or part.step != step or part.meta.get("node") != self.of:
                    raise SlurmpreError(f"{where} served no part of node {self.of} of step {step}")
            except (OSError, SlurmpreError) as exc:
                shutil.rmtree(dest, ignore_errors=True)
                if str(exc) != self._said and "no folder named" not in str(exc):
                    LOG.info(f"keeping node {self.of}'s part of step {step} here: {exc}")
                self._said = str(exc)
                continue
            self.done = step
            for old in replicas(self.run):
                if old.step < step:
                    shutil.rmtree(old.path, ignore_errors=True)
            with contextlib.suppress(SlurmpreError):
                self.ledger.append(Replicated(job=self.job, attempt=self.at.restart,
                                              in_place=self.at.in_place, node=self.node,
                                              of=self.of, step=step, bytes=got.bytes,
                                              seconds=round(got.seconds, 3)))  # fmt: skip
