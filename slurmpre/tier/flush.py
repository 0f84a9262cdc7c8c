"""The flush: each node's wrapper copies the node-local checkpoints into the checkpoint
folder in the background, and node 0 commits them there under the folder's rules
(docs/local-tier.md, 2). Node 0 announces a step by making its in-flight folder; the
other nodes copy their part into it once it is there, and mark it copied.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from slurmpre.errors import SlurmpreError
from slurmpre.folder import checkpoints
from slurmpre.folder.access import Access, make_dir, make_dirs
from slurmpre.folder.layout import FolderLayout
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import Checkpoint
from slurmpre.signals import quiet_thread
from slurmpre.tier import local, replica, salvage

LOG = logging.getLogger(__name__)

POLL = 0.25  # seconds between looks at the node-local folder
PEERS_WAIT = 600.0  # seconds node 0 waits for the other nodes' parts of one step
RETRY = 2.0  # seconds before a flush that failed (the shared volume) is tried again
TRIES = 10  # failures in a row after which node 0 gives a step up (it stays on the node)
LOCK_WAIT = 600.0  # seconds the commit waits for the folder's writing lock (`ckpt prune`)
CHUNK = 32 << 20  # bytes copied between looks at whether the training is saving
GIVE_WAY = 30.0  # seconds at most a part's copy pauses for the training's saves


class Flusher:
    """One node's flush, on a thread of the wrapper: start it before the training, stop
    it after (`stop` flushes what is newest first)."""

    def __init__(
        self,
        held: local.Held,
        folder: Path,
        *,
        tag: str,
        node_id: int,
        nodes: int,
        access: Access,
    ) -> None:
        self.held, self.run, self.folder, self.tag = held, held.run, folder, tag
        self.node_id, self.nodes, self.access = node_id, nodes, access
        self.ledger = Ledger(folder, access=access)
        self.lead = node_id == 0
        self.durable = _newest_durable(folder)
        self.busy: int | None = None
        self.abandoned: set[int] = set()  # steps node 0 gave up on (a node's part never came)
        self.adopted: list[salvage.Taken] = []  # what it took over from an earlier attempt here
        self._finish = threading.Event()
        self._quit = threading.Event()  # a job that took over holds the newest: no flush
        self._done = threading.Event()
        self.error: str | None = None

    @classmethod
    def for_node(
        cls,
        setting: str | None,
        env: Mapping[str, str],
        folder: Path,
        *,
        node: str,
        attempt: str,
        adopt_job: str | None = None,
        **kwargs: Any,
    ) -> Flusher | None:
        """A node's flush, started, when ``setting`` (the spec's ``local_dir``) names a
        folder this node can use; else None, and one line when it named one. With
        ``adopt_job``: the newest whole copy an earlier attempt of that job left on this
        node is taken over first, when the folder holds nothing as new (`local.adopt`)."""
        adopted: list[salvage.Taken] = []
        try:
            held = local.prepare(setting, env, folder, node, attempt, clear=not adopt_job)
            if held is not None and adopt_job:
                adopted = salvage.adopt(held.run, adopt_job, _newest_durable(folder))
                local.clear_dead(held.run.parent, keep=held.run.name)
        except local.Unusable as exc:
            LOG.info(f"{exc}: checkpoints go straight to the checkpoint folder")
            return None
        except OSError as exc:
            LOG.info(
                f"local_dir {setting!r}: {exc.strerror or exc}: checkpoints go straight to "
                "the checkpoint folder"
            )
            return None
        if held is None:
            return None
        flusher = cls(held, folder, **kwargs)
        flusher.adopted = adopted
        return flusher.start()

    def start(self) -> Flusher:
        quiet_thread(self._loop, name="slurmpre-flush")
        return self

    def stop(self, timeout: float, handed: Callable[[], bool] = lambda: False) -> bool:
        """Flush the newest part (node 0 waits for the others' too), then stop; True when
        this node's newest part is in the checkpoint folder, or given up on, or ``handed``
        says a job that took over holds it. Removes nothing (`finish` does)."""
        self._finish.set()
        deadline = time.monotonic() + timeout
        while not self._done.wait(min(1.0, max(0.0, deadline - time.monotonic()))):
            if handed():
                self._quit.set()
                return True
            if time.monotonic() >= deadline:
                break
        return self.settled()

    def abandon(self) -> None:
        """Stop without waiting and leave the copies where they are, the folder's lock let
        go: the next step on this node takes them over (`salvage.adopt`)."""
        self._quit.set()
        self.held.release()

    def finish(self, timeout: float, handed: Callable[[], bool] = lambda: False) -> bool:
        """`stop`, then the node's copies removed when the newest is durable or handed
        over (else they stay, said); the folder's lock let go. True when removed."""
        done = self.stop(timeout, handed)
        gone = handed() or self.durable_newest()
        if gone:
            shutil.rmtree(self.run, ignore_errors=True)  # its lock goes once it is let go
        elif done:
            LOG.info(f"the newest checkpoint is not in the folder: it stays in {self.run}")
        else:
            LOG.info(f"the flush did not finish in {timeout:g} s: copies stay in {self.run}")
        self.held.release()
        return gone

    def _newest(self) -> local.Part | None:
        """This node's newest part that is not given up."""
        held = [p for p in local.parts(self.run) if p.step not in self.abandoned]
        return held[-1] if held else None

    def settled(self) -> bool:
        """Whether this node's newest part not given up is in the checkpoint folder (a
        node other than node 0 waits for node 0's commit, or `stop`'s timeout)."""
        return self._in_folder(self._newest())

    def durable_newest(self) -> bool:
        """Whether this node's newest part, given up or not, is in the checkpoint folder:
        only then may its copies go."""
        held = local.parts(self.run)
        return self._in_folder(held[-1] if held else None)

    def _in_folder(self, part: local.Part | None) -> bool:
        return part is None or part.step <= self.durable or self._committed(part.step)

    def _committed(self, step: int) -> bool:
        return FolderLayout(self.folder).step(step).is_dir()

    # -- the thread -----------------------------------------------------------------
    def _loop(self) -> None:
        failures = 0
        try:
            while not self._quit.is_set():
                finishing = self._finish.is_set()
                try:
                    worked = self._cycle()
                    failures = 0
                except Exception as exc:  # noqa: BLE001 - said, and tried again
                    if str(exc) != self.error:
                        LOG.info(f"the flush to the checkpoint folder failed, trying again: {exc}")
                    self.error, worked = str(exc), False
                    failures += 1
                    if failures >= TRIES and self.lead:
                        self._give_up(str(exc))
                        failures = 0
                    time.sleep(RETRY)
                if finishing and self.settled():
                    return
                if not worked:
                    time.sleep(POLL) if finishing else self._finish.wait(POLL)
        finally:
            self._done.set()

    def _cycle(self) -> bool:
        """One look: flush what is due; True when something was done."""
        held = [p for p in local.parts(self.run) if p.step not in self.abandoned]
        worked = False
        if self.lead:
            due = [p for p in held if p.step > self.durable]
            if due and self._committed(due[-1].step):  # another attempt's flush put it there
                self.durable, due = due[-1].step, []
            if due:
                newest = due[-1]
                skipped = [p.step for p in due[:-1]]
                if skipped:
                    steps = ", ".join(map(str, skipped))
                    LOG.info(f"flush: steps {steps} skipped, step {newest.step} is newer")
                self._prune(newest.step)  # before a copy of minutes, not after it
                self._lead(newest)
                worked = True
        else:
            # Node 0's in-flight folder of a step this node holds, without this node's mark
            # (node 0 makes both anew when it tries again): copy the part, then mark it.
            for part in reversed(held):
                incoming = self._incoming(part.step)
                if incoming.is_dir() and not self._has_mark(incoming):
                    self._prune(part.step)
                    self._copy(part, incoming)
                    self._mark(incoming)
                    worked = True
                    break
        self._prune(self.busy)
        return worked

    def _prune(self, flushing: int | None) -> None:
        """Remove the parts no longer needed here (`local.prune`): all but the newest, the
        one being flushed, and a step whose neighbour's part this node keeps (with one of
        the two nodes lost, the other still holds that step whole: `replica`)."""
        kept = {r.step for r in replica.replicas(self.run)}
        local.prune(self.run, busy=frozenset(() if flushing is None else {flushing}) | kept)

    def _give_up(self, why: str) -> None:
        """The newest step cannot reach the folder (the volume refuses it): it stays on
        this node, said, and the attempt's end no longer waits for it."""
        newest = self._newest()
        if newest is not None and newest.step > self.durable:
            self.abandoned.add(newest.step)
            LOG.info(f"flush: step {newest.step} given up after {TRIES} failures ({why}); "
                     f"it stays in {self.run}")  # fmt: skip

    def _incoming(self, step: int) -> Path:
        return FolderLayout(self.folder).incoming(step, self.tag)

    def _mark(self, incoming: Path) -> None:
        marks = FolderLayout.sync(incoming)
        with contextlib.suppress(FileExistsError):
            make_dir(marks, self.access)
        (marks / f"node-{self.node_id}").touch()

    def _has_mark(self, incoming: Path) -> bool:
        return (FolderLayout.sync(incoming) / f"node-{self.node_id}").exists()

    def _marked(self, incoming: Path) -> int:
        marks = FolderLayout.sync(incoming)
        return sum((marks / f"node-{n}").exists() for n in range(self.nodes))

    def _lead(self, part: local.Part) -> None:
        self.busy = part.step
        began = time.monotonic()
        incoming = self._incoming(part.step)
        shutil.rmtree(FolderLayout.sync(incoming), ignore_errors=True)  # marks first: a
        shutil.rmtree(incoming, ignore_errors=True)  # node copies again into the new one
        make_dirs(self.folder, self.access)
        make_dir(incoming, self.access)
        try:
            self._copy(part, incoming)
            self._mark(incoming)
            if not self._wait_peers(part, incoming):
                return
            with self.ledger.writing_lock(LOCK_WAIT):
                final = checkpoints.commit(incoming, self.folder, part.step, access=self.access)
            flushed = time.monotonic() - began
            self.durable = part.step
            self._record(part, final, flushed)
        finally:
            shutil.rmtree(FolderLayout.sync(incoming), ignore_errors=True)
            if incoming.exists():  # not committed: never left for a resume to find
                shutil.rmtree(incoming, ignore_errors=True)
            self.busy = None

    def _wait_peers(self, part: local.Part, incoming: Path) -> bool:
        deadline = time.monotonic() + PEERS_WAIT
        while self._marked(incoming) < self.nodes:
            newest = self._newest()
            newer = newest is not None and newest.step > part.step
            if newer or time.monotonic() > deadline:
                left = self.nodes - self._marked(incoming)
                why = "a newer step is due" if newer else f"{PEERS_WAIT:g} s passed"
                LOG.info(
                    f"flush: step {part.step} skipped, {left} node(s) did not copy "
                    f"their part ({why})"
                )
                self.abandoned.add(part.step)
                return False
            time.sleep(POLL)
        return True

    def _copy(self, part: local.Part, incoming: Path) -> None:
        """This node's files into node 0's in-flight folder, each whole or not at all
        (written under a hidden name, then renamed): a file there is a complete one. It
        gives way to the training's saves on the node for GIVE_WAY seconds in all."""
        until = time.monotonic() + GIVE_WAY

        def give_way() -> bool:
            return time.monotonic() < until and local.saving(self.run)

        for rel in part.files:
            dest = incoming / rel
            if dest.parent != incoming:
                make_dirs(dest.parent, self.access)
            if dest.exists():
                continue  # another node's file of that name, whole: the first one stays
            partial = dest.with_name(f".{dest.name}.part-{self.node_id}-{os.getpid()}")
            with contextlib.suppress(FileNotFoundError):
                partial.unlink()
            try:
                copy_file(part.path / rel, partial, self.access.file_mode, give_way=give_way)
                if not dest.exists():
                    partial.rename(dest)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    partial.unlink()

    def _record(self, part: local.Part, final: Path, flushed: float) -> None:
        meta = part.meta
        if not meta.get("job"):
            return
        try:
            self.ledger.append(
                Checkpoint(
                    job=str(meta["job"]),
                    attempt=int(meta.get("attempt", 0)),
                    in_place=int(meta.get("in_place", 0)),
                    step=part.step,
                    path=str(final),
                    after_notice=bool(meta.get("after_notice")),
                    seconds=meta.get("seconds"),
                    stopping=meta.get("stopping") or None,
                    flush_seconds=round(flushed, 3),
                )
            )
        except SlurmpreError as exc:
            LOG.info(f"flush: step {part.step} is committed, but not recorded: {exc}")
        else:
            LOG.info(f"flush: step {part.step} committed in the shared folder ({flushed:.1f} s)")


_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def copy_file(
    src: Path, dest: Path, mode: int, give_way: Callable[[], bool] = lambda: False
) -> None:
    """``src`` into a new ``dest`` (never an existing one), neither a link; in the kernel
    (sendfile) where it can. Between chunks, while ``give_way()`` (the training is saving
    on this node, and waits for it), the copy pauses, for GIVE_WAY seconds at most."""
    fin = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    paused = 0.0
    try:
        fout = os.open(dest, _NEW, mode)
        try:
            size, done = os.fstat(fin).st_size, 0
            try:
                while done < size:
                    while paused < GIVE_WAY and give_way():
                        time.sleep(0.05)
                        paused += 0.05
                    sent = os.sendfile(fout, fin, done, min(size - done, CHUNK))
                    if sent == 0:
                        raise OSError(errno.EIO, f"{src} ended at {done} of {size} bytes")
                    done += sent
            except OSError as exc:
                if exc.errno not in (errno.EINVAL, errno.ENOSYS) or done:
                    raise
                with os.fdopen(os.dup(fin), "rb") as a, os.fdopen(os.dup(fout), "wb") as b:
                    shutil.copyfileobj(a, b, 1 << 22)
        finally:
            os.close(fout)
    finally:
        os.close(fin)


def _newest_durable(folder: Path) -> int:
    with contextlib.suppress(SlurmpreError, OSError):
        found = checkpoints.latest(folder).checkpoint
        if found is not None and found.step is not None:
            return found.step
    return -1
