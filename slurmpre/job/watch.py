"""The watcher: turn the provider's drain into a notice, the notice into a checkpoint, then requeue.

One watcher per job, on node 0: it asks Slurm about all the job's nodes in one
query per interval (default 5 s, with jitter). A node of the job entering
DRAIN (any reason, or one matching a pattern) is a preemption notice for the
whole job; so is the time-limit warning Slurm sends with ``--signal``. On a
notice it publishes the notice file for every rank, waits until a checkpoint
newer than the notice has committed, and requeues the job itself (or, by the
deadline inside the window, requeues anyway). It never takes the training
down: when Slurm does not answer it backs off and keeps watching.
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from slurmpre.errors import SlurmpreError
from slurmpre.job import checkpoints
from slurmpre.job.env import JobEnv
from slurmpre.job.ledger import Ledger
from slurmpre.job.notice import Notice, listening_path, notice_path, write_notice
from slurmpre.slurm.client import SlurmClient


class NoticeSource(Protocol):
    """Something that can tell that the job is about to lose its nodes."""

    name: str

    def poll(self) -> Notice | None:
        """A notice, None when all is well; raise SlurmpreError when it cannot tell."""
        ...


class DrainSource:
    """The provider's notice: a node of the job drained (one query for all nodes)."""

    name = "drain"

    def __init__(
        self,
        client: SlurmClient,
        nodes: Sequence[str],
        reason: re.Pattern[str] | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.nodes = tuple(nodes)
        self.reason = reason
        self.wall = wall
        self.queries = 0

    def draining(self) -> list[Notice]:
        self.queries += 1
        found = []
        for node in self.client.nodes(self.nodes):
            if node.name not in self.nodes or not node.draining:
                continue
            if self.reason is not None and not self.reason.search(node.reason or ""):
                continue
            found.append(Notice("drain", node.name, node.reason, self.wall()))
        return found

    def poll(self) -> Notice | None:
        found = self.draining()
        return found[0] if found else None


class SignalSource:
    """The time-limit warning: Slurm's ``--signal`` reaches the wrapper, which calls `trigger`."""

    name = "time-limit"

    def __init__(self, wall: Callable[[], float] = time.time) -> None:
        self.wall = wall
        self._at: float | None = None

    def trigger(self) -> None:  # called from a signal handler: just a store
        if self._at is None:
            self._at = self.wall()

    def poll(self) -> Notice | None:
        if self._at is None:
            return None
        return Notice("time-limit", None, "time limit warning from Slurm (--signal)", self._at)


@dataclass(frozen=True)
class WatchConfig:
    interval: float = 5.0  # seconds between Slurm queries
    jitter: float = 0.2  # +- this fraction of the interval, so jobs do not poll in step
    window: float = 300.0  # drain -> removal, the provider's five minutes
    time_warning: float = 300.0  # --signal warning -> time limit
    margin: float = 30.0  # requeue anyway this long before the window closes
    commit_poll: float = 1.0  # how often to look for the just-in-time checkpoint
    max_backoff: float = 60.0  # longest wait between queries while Slurm does not answer


class Watcher:
    def __init__(
        self,
        sources: Sequence[NoticeSource],
        job: JobEnv,
        folder: Path,
        ledger: Ledger,
        client: SlurmClient,
        config: WatchConfig,
        *,
        requeue_allowed: bool,
        say: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        sleep: Callable[[float], None] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.sources = list(sources)
        self.job = job
        self.folder = folder
        self.ledger = ledger
        self.client = client
        self.config = config
        self.requeue_allowed = requeue_allowed
        self.say = say
        self.clock = clock
        self.wall = wall
        self.rng = rng or random.Random()
        self.stop_event = threading.Event()
        self.finished = threading.Event()  # set once the requeue is done (or skipped)
        self.sleep = sleep or self.stop_event.wait
        self.notice: Notice | None = None
        self.deadline: float | None = None
        self.step_at_notice: int | None = None
        self.done = False
        self.failures = 0
        self.drained_seen: set[str] = set()

    # -- the loop -------------------------------------------------------------
    def run(self) -> None:
        next_query = self.clock()
        while not self.stop_event.is_set() and not self.done:
            now = self.clock()
            if now >= next_query:
                next_query = now + self._poll_sources()
            if self.notice is not None and not self.done:
                self._follow_up()
            wait = next_query - self.clock()
            if self.notice is not None:
                wait = min(wait, self.config.commit_poll)
            self.sleep(max(wait, 0.01))

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self._run_guarded, name="slurmpre-watch", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self.stop_event.set()

    def committed_since_notice(self) -> tuple[int | None, str] | None:
        return None if self.notice is None else self._committed_since_notice(self.notice)

    def skip(self, why: str) -> None:
        """Do not requeue for the pending notice (the training finished its work)."""
        self._ledger({"event": "requeue_skipped", "why": why})
        self.done = True
        self.finished.set()

    def seconds_left(self) -> float:
        """Until the deadline of a pending notice (0 without one)."""
        if self.deadline is None:
            return 0.0
        return max(self.deadline - self.clock(), 0.0)

    def _run_guarded(self) -> None:
        try:
            self.run()
        except Exception as exc:  # noqa: BLE001 - the watcher must never take the training down
            self.say(f"watcher stopped by an unexpected error: {type(exc).__name__}: {exc}")

    # -- polling ----------------------------------------------------------------
    def _next_interval(self) -> float:
        base = self.config.interval
        if self.failures:
            base = min(self.config.max_backoff, base * 2 ** min(self.failures, 6))
        return base * (1 + self.rng.uniform(-self.config.jitter, self.config.jitter))

    def _poll_sources(self) -> float:
        """Ask every source; returns the seconds until the next query."""
        for source in self.sources:
            try:
                if self.notice is not None and isinstance(source, DrainSource):
                    for extra in source.draining():
                        self._record_drain(extra)
                    continue
                found = source.poll()
            except SlurmpreError as exc:
                self.failures += 1
                if self.failures == 1 or self.failures % 10 == 0:
                    first = str(exc).splitlines()[0]
                    self.say(f"Slurm does not answer ({first}); training goes on, retrying")
                continue
            if self.failures:
                self.say(f"Slurm answers again after {self.failures} failed queries")
                self.failures = 0
            if found is not None and self.notice is None:
                self._on_notice(found)
        return self._next_interval()

    def _record_drain(self, notice: Notice) -> None:
        if notice.node is None or notice.node in self.drained_seen:
            return
        self.drained_seen.add(notice.node)
        self.say(f"another node drained: {notice.describe()}")
        self._ledger(_notice_record(notice, first=False))

    # -- after a notice -----------------------------------------------------------
    def _on_notice(self, notice: Notice) -> None:
        self.notice = notice
        if notice.node:
            self.drained_seen.add(notice.node)
        window = self.config.window if notice.kind == "drain" else self.config.time_warning
        self.deadline = self.clock() + max(window - self.config.margin, 0.0)
        current = checkpoints.latest(self.folder).checkpoint
        self.step_at_notice = current.step if current else None
        write_notice(notice_path(self.folder, self.job.tag, self.job.restart_count), notice)
        self.say(
            f"preemption notice: {notice.describe()}; asking every rank to checkpoint, "
            f"requeue within {max(window - self.config.margin, 0):.0f} s"
        )
        self._ledger(_notice_record(notice, first=True, step_at_notice=self.step_at_notice))

    def _committed_since_notice(self, notice: Notice) -> tuple[int | None, str] | None:
        # A script that asks preemption_requested() checkpoints on the notice itself:
        # wait for that one, not for a periodic save that lands first, or the steps
        # it trains between the two would be lost.
        listening = listening_path(self.folder, self.job.tag, self.job.restart_count).exists()
        for record in reversed(self.ledger.records()):
            if (
                record.get("event") == "checkpoint"
                and record.get("attempt") == self.job.restart_count
                and record.get("time", 0) >= notice.seen_at
                and (record.get("after_notice") or not listening)
            ):
                return record.get("step"), str(record.get("path"))
        if listening:
            return None
        found = checkpoints.latest(self.folder).checkpoint
        if (
            found is not None
            and found.step is not None
            and (self.step_at_notice is None or found.step > self.step_at_notice)
        ):
            return found.step, str(found.path)
        return None

    def _follow_up(self) -> None:
        if self.notice is None or self.deadline is None:
            return
        committed = self._committed_since_notice(self.notice)
        if committed is not None:
            step, path = committed
            self.say(f"checkpoint of step {step} committed after the notice: {path}")
            self._ledger(
                {"event": "committed", "step": step, "path": path, "committed_seen_at": self.wall()}
            )
            self._requeue("after the just-in-time checkpoint")
        elif self.clock() >= self.deadline:
            self.say("no checkpoint committed before the deadline; requeuing anyway")
            self._requeue("deadline inside the window")

    def _requeue(self, why: str) -> None:
        if not self.requeue_allowed:
            self.say(
                "the job was submitted without --requeue: not requeuing it "
                "(the checkpoint is taken; resubmit to resume)"
            )
            self._ledger({"event": "requeue_skipped", "why": "job has no --requeue"})
            self.done = True
            self.finished.set()
            return
        try:
            self.client.requeue(self.job.job_id)
        except SlurmpreError as exc:
            self.say(f"requeue failed, retrying: {str(exc).splitlines()[0]}")
            return  # the next follow-up tries again, until the window closes
        self.say(f"requeued job {self.job.job_id} ({why})")
        self._ledger({"event": "requeued", "why": why, "requeued_at": self.wall()})
        self.done = True
        self.finished.set()

    def _ledger(self, record: dict[str, object]) -> None:
        try:
            self.ledger.append({"job": self.job.tag, "attempt": self.job.restart_count, **record})
        except SlurmpreError as exc:
            self.say(f"could not write the ledger: {exc}")


def _notice_record(notice: Notice, *, first: bool, **extra: object) -> dict[str, object]:
    return {
        "event": "notice",
        "kind": notice.kind,
        "node": notice.node,
        "reason": notice.reason,
        "seen_at": notice.seen_at,
        "first": first,
        **extra,
    }
