"""The hand-over over the network: a successor pulls the newest node-local checkpoint
straight from the nodes of the job it takes over from (docs/local-tier.md, 3), proving
it holds the run's key, ``.slurmpre/tier.key`` (docs/security.md, 10).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from slurmpre.errors import SlurmpreError, TransferError
from slurmpre.folder import trust
from slurmpre.folder.layout import FolderLayout, step_dir_name
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import (
    AttemptId,
    End,
    PullAsked,
    PullDone,
    Pulled,
    Record,
    Saved,
    Serving,
    Successor,
)
from slurmpre.reading import SMALL
from slurmpre.signals import quiet_thread
from slurmpre.tier import local, transfer
from slurmpre.tier import serving as where
from slurmpre.tier.serving import SERVE_WAIT

POLL = 0.2  # seconds between reads of the ledger while a pull is being arranged
PULL_WAIT = 300.0  # seconds node 0 waits for its nodes' pulls
PULL_TIMEOUT = 30.0  # seconds a stalled connection is given
MAX_CLIENTS = 256  # connections one node's server takes at once
LOG = logging.getLogger(__name__)


def run_key(folder: Path) -> bytes:
    """The run's key: made once (the first node to ask), the owner's alone, read without
    following a link and refused (`trust.Untrusted`) when anyone else could have written it."""
    path = FolderLayout(folder).tier_key
    with contextlib.suppress(FileNotFoundError):
        return _read_key(path)
    fresh = path.with_name(f".{path.name}.{os.getpid()}-{os.urandom(4).hex()}")
    trust.write(fresh, os.urandom(transfer.KEY_BYTES).hex() + "\n", mode=0o600)
    try:
        os.link(fresh, path, follow_symlinks=False)  # the first node's key wins
    except FileExistsError:
        pass
    finally:
        fresh.unlink(missing_ok=True)
    return _read_key(path)


def _read_key(path: Path) -> bytes:
    text = trust.read_text(path, SMALL).strip()
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) != transfer.KEY_BYTES:
        raise trust.Untrusted(f"{str(path)!r} holds no key of {transfer.KEY_BYTES} bytes")
    return key


def serve(
    run: Path, folder: Path, record: Callable[..., None], node: str
) -> transfer.Server | None:
    """This node's local checkpoints, served to a job that holds the run's key, and where
    recorded (``record(Serving, ...)``); None (said) when it cannot."""
    try:
        # Every node of a big job may pull from this one at once (in place, a restart's
        # gather), beside its neighbour's copy: more clients than nodes are let in.
        server = transfer.Server(run, run_key(folder), max_clients=MAX_CLIENTS).start()
        record(Serving, node=node, host=socket.gethostname(), port=server.port)
    except (OSError, SlurmpreError) as exc:
        LOG.info(f"cannot serve this node's checkpoints to the job that takes over: {exc}")
        return None
    return server


def served_save(records: Sequence[Record], predecessor: str) -> tuple[int, list[str]] | None:
    """The predecessor's newest after-notice save once its training has ended, and where
    each of its nodes serves it; None while there is none, or while not every node that
    trained in that attempt (its `Start`) serves: a part missing is no checkpoint."""
    saves = [r for r in records if isinstance(r, Saved) and r.job == predecessor and r.after_notice]
    if not saves:
        return None
    last = saves[-1]
    ended = any(isinstance(r, End) and r.job == predecessor and r.attempt_id == last.attempt_id
                for r in records)  # fmt: skip
    sources = where.all_of(records, predecessor, last.attempt_id)
    if not ended or sources is None:
        return None
    return last.step, sorted(sources)


def arrange(
    ledger: Ledger,
    *,
    job: str,
    attempt: int,
    predecessor: str,
    nodes: int,
    durable: Callable[[], int | None],
    ended: Callable[[], bool],
    timeout: float,
) -> int | None:
    """A successor's node 0: the step every node now holds, pulled from the predecessor's
    nodes; None when the folder's newest checkpoint (``durable()``) is newer, the
    predecessor ended first (``ended``), or a pull failed (said): resume from the folder.
    A save the folder holds too is pulled all the same: RAM to RAM beats reading it back."""
    deadline = time.monotonic() + timeout
    while (found := served_save(ledger.records(), predecessor)) is None:
        if ended() or time.monotonic() > deadline:
            return None
        time.sleep(POLL)
    step, sources = found
    newest = durable()
    if newest is not None and step < newest:
        return None
    if not all_serve(ledger, job, AttemptId(attempt), nodes):
        LOG.info(f"not every node of this job has a node-local folder: not pulling step {step}")
        return None
    ok = ask_pulls(ledger, job=job, at=AttemptId(attempt), predecessor=predecessor, step=step,
                   sources=sources, pullers=tuple(range(nodes)))  # fmt: skip
    return step if ok else None


def ask_pulls(
    ledger: Ledger,
    *,
    job: str,
    at: AttemptId,
    predecessor: str,
    step: int,
    sources: Sequence[str],
    pullers: tuple[int, ...],
) -> bool:
    """Node 0: ask ``pullers`` (node ids of this attempt) to pull ``step`` from ``sources``
    (`PullAsked`), wait for them (`Pulled`), and record how it went (`PullDone`): True
    when every one holds it; else False, said in one line (the folder, never a mix)."""
    ledger.append(PullAsked(job=job, attempt=at.restart, in_place=at.in_place,
                            predecessor=predecessor, step=step, sources=tuple(sources),
                            pullers=pullers))  # fmt: skip
    said = time.monotonic() + PULL_WAIT
    results: dict[int, Pulled] = {}
    while len(results) < len(pullers) and time.monotonic() < said:
        for r in ledger.records():
            if isinstance(r, Pulled) and r.job == job and r.attempt_id == at \
                    and r.step == step and r.node in pullers:  # fmt: skip
                results[r.node] = r
        if any(not r.ok for r in results.values()):
            break  # one failed: the folder, whatever the others do
        if len(results) < len(pullers):
            time.sleep(POLL)
    failed = [r for r in results.values() if not r.ok]
    why = None
    if failed:
        why = f"node {failed[0].node}: {failed[0].why}"
    elif len(results) < len(pullers):
        why = f"{len(pullers) - len(results)} node(s) did not pull within {PULL_WAIT:g} s"
    ok = why is None
    ledger.append(PullDone(job=job, attempt=at.restart, in_place=at.in_place,
                           predecessor=predecessor, step=step, ok=ok, why=why))  # fmt: skip
    whence = f"job {predecessor}'s nodes" if predecessor != job else "this attempt's nodes"
    if not ok:
        LOG.info(
            f"pulling step {step} from {whence} failed ({why}): "
            "resuming from the newest checkpoint in the folder"
        )
        return False
    moved = sum(r.bytes for r in results.values()) / 1e6
    took = max((r.seconds for r in results.values()), default=0.0)
    LOG.info(f"step {step} pulled from {whence}: {moved:.0f} MB in {took:.1f} s")
    return True


def all_serve(ledger: Ledger, job: str, at: AttemptId, nodes: int) -> bool:
    """Every node of this attempt serves (so each has a node-local folder and a puller),
    within a few seconds of its start."""
    deadline = time.monotonic() + SERVE_WAIT
    while len(where.serving(ledger.records(), job, at)) < nodes:
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL)
    return True


def await_taker(ledger: Ledger, job: str, attempt: int, step: int, grace: float) -> None:
    """A job that handed over to a successor, its notice save (``step``) already in the
    folder: serve it a little longer, until the successor has pulled it (or given up),
    at most ``grace`` seconds: reading it from this node's RAM beats reading it back."""
    records = ledger.records()
    if not any(isinstance(r, Successor) and r.job == job for r in records):
        return
    if not any(isinstance(r, Saved) and r.job == job and r.attempt_id == AttemptId(attempt)
               and r.after_notice and r.step == step for r in records):  # fmt: skip
        return
    deadline = time.monotonic() + grace
    while not any(isinstance(r, PullDone) and r.predecessor == job for r in records):
        if time.monotonic() >= deadline:
            LOG.info(f"no job pulled this node's checkpoint within {grace:g} s")
            return
        time.sleep(POLL)
        records = ledger.records()


def pulled_by_successor(records: Sequence[Record], job: str, step: int) -> bool:
    """Whether a job taking over from ``job`` holds ``step`` (or a newer one) on all its
    nodes: this one may stop serving and flushing it. Not the job's own pull in place: its
    next step takes that copy over from this one's folder (`local.adopt`)."""
    return any(isinstance(r, PullDone) and r.predecessor == job and r.job != job and r.ok
               and r.step >= step for r in records)  # fmt: skip


class Puller:
    """Each node of a successor: pulls what node 0 asks (`arrange`) into this node's
    local folder, on a thread of the wrapper, and records how it went (`Pulled`, with
    why it failed): node 0 says the outcome, in one line, for every node."""

    def __init__(
        self,
        run: Path,
        folder: Path,
        ledger: Ledger,
        *,
        job: str,
        attempt: int,
        node: int,
        in_place: int = 0,
        poll: float = POLL,
    ) -> None:
        self.run, self.folder, self.ledger = run, folder, ledger
        self.job, self.attempt, self.node = job, attempt, node
        self.at, self.poll = AttemptId(attempt, in_place), poll
        self._stop = threading.Event()

    def start(self) -> Puller:
        quiet_thread(self._loop, name="slurmpre-pull")
        return self

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        """Every pull asked of this node in its attempt, once each, in turn (a successor's at
        its start, the same step's own when it restarts in place later)."""
        handled, seen = 0, (-1, -1)
        while not self._stop.is_set():
            try:  # the ledger is read again only once it has grown: it is on the shared volume
                st = self.ledger.path.stat()
                grown, seen = (st.st_size, st.st_mtime_ns) != seen, (st.st_size, st.st_mtime_ns)
                records = self.ledger.records() if grown else []
            except (OSError, SlurmpreError):
                records, seen = [], (-1, -1)
            if not records:
                self._stop.wait(self.poll)
                continue
            asked = [r for r in records if isinstance(r, PullAsked) and r.job == self.job
                     and r.attempt_id == self.at]  # fmt: skip
            for r in asked[handled:]:
                if r.pullers is None or self.node in r.pullers:
                    self._pull(r)
            handled = len(asked)
            self._stop.wait(self.poll)

    def _wanted(self, asked: PullAsked) -> bool:
        """Node 0 has not decided on this pull yet (it resumes from the folder once it has
        given up). Beside a spare, the one that decides is the step before's node 0, which
        records the outcome under its own step (`tier.in_place`)."""
        deciders = (self.at, self.at.step_before)
        return not any(isinstance(r, PullDone) and r.job == self.job
                       and r.attempt_id in deciders and r.predecessor == asked.predecessor
                       and r.step == asked.step and (r.time or 0) >= (asked.time or 0)
                       for r in self.ledger.records())  # fmt: skip

    def _pull(self, asked: PullAsked) -> None:
        began = time.monotonic()
        size, why = 0, None
        try:
            size = pull_all(asked.sources, run_key(self.folder), asked.step, self.run,
                            lambda: self._wanted(asked))  # fmt: skip
        except (OSError, SlurmpreError) as exc:
            why = str(exc)  # in its record: node 0's one line says it (`ask_pulls`)
            LOG.debug("node %d: pulling step %d: %s", self.node, asked.step, why)
        with contextlib.suppress(SlurmpreError):
            self.ledger.append(
                Pulled(
                    job=self.job,
                    attempt=self.attempt,
                    in_place=self.at.in_place,
                    node=self.node,
                    step=asked.step,
                    ok=why is None,
                    seconds=round(time.monotonic() - began, 3),
                    bytes=size,
                    why=why,
                )
            )


def pull_all(
    sources: Sequence[str],
    key: bytes,
    step: int,
    run: Path,
    wanted: Callable[[], bool] = lambda: True,
) -> int:
    """Pull ``step`` from every source (each node's part) and seal them as one whole copy
    in ``run`` (unless ``wanted()`` says node 0 has given up meanwhile); the bytes pulled.
    Every node of the save must be there (each part says which it is, of how many), and
    only the files the transfer brought count. Nothing is left of a pull that fails."""
    name = step_dir_name(step)
    merged = run / f".pulling-{name}-{os.getpid()}"
    shutil.rmtree(merged, ignore_errors=True)
    merged.mkdir(mode=0o700)
    taken: list[Path] = []
    try:
        size, meta, nodes, seen = 0, dict[str, object](), None, set[int]()
        for i, source in enumerate(sources):
            address, _, served = source.partition("/")  # host:port, or host:port/folder
            host, _, port = address.rpartition(":")
            dest = run / f".pulled-{name}-{i}-{os.getpid()}"
            shutil.rmtree(dest, ignore_errors=True)
            taken.append(dest)
            transfer.pull(host, int(port), key, served or name, dest, timeout=PULL_TIMEOUT)
            part = local.read_part(dest, named=False)  # its seal, checked against what came
            if part is None or part.step != step:
                raise TransferError(f"{source} served no whole part of step {step}")
            node, of = part.meta.get("node"), part.meta.get("nodes")
            if not isinstance(of, int) or nodes not in (None, of):
                raise TransferError(f"{source}: its part of step {step} names no node of the save")
            if part.whole:
                seen.update(range(of))  # a whole copy (one node's taken over): every part
            elif isinstance(node, int):
                seen.add(node)
            else:
                raise TransferError(f"{source}: its part of step {step} names no node of the save")
            nodes = of
            meta = meta or dict(part.meta)
            for rel, length in part.files.items():
                target = merged / rel
                if target.exists():
                    continue  # the same file from two nodes: the first stays
                target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                (dest / rel).rename(target)
                size += length
        if nodes is None or seen != set(range(nodes)):
            raise TransferError(
                f"step {step}: the parts of node(s) {sorted(seen)} of {nodes}, not every node's"
            )
        if not wanted():
            raise TransferError(f"step {step} came too late: node 0 resumes from the folder")
        local.seal(merged, run, step, {**meta, "whole": True, "node": None})
        return size
    finally:
        shutil.rmtree(merged, ignore_errors=True)
        for dest in taken:
            shutil.rmtree(dest, ignore_errors=True)
