"""The watcher: one per job, on node 0, in a thread of its own that alone owns its state.

It asks every notice source on its own schedule (a source that fails backs off on its
own, up to a minute); from the first notice on, `after_notice` sees it through. It
never takes the training down. The main thread talks to it only through `post_exit`
and reads the outcome after `finished` is set.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from slurmpre.errors import SlurmpreError
from slurmpre.folder.ledger import Ledger
from slurmpre.job.handover.restart import Restarts
from slurmpre.job.start.env import JobEnv
from slurmpre.job.start.options import WatchConfig
from slurmpre.job.watch.after_notice import AfterNotice, Outcome
from slurmpre.job.watch.attempt_log import AttemptLog
from slurmpre.job.watch.notice import NoticeSource
from slurmpre.job.watch.phases import Clock
from slurmpre.signals import quiet_thread
from slurmpre.slurm.client import SlurmClient

LOG = logging.getLogger(__name__)


@dataclass
class _Schedule:
    """One source's own polling schedule and failure count."""

    source: NoticeSource
    due: float = 0.0
    failures: int = 0


_STOP = object()


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
        clock: Clock | None = None,
        wait: Callable[[float], object] | None = None,
        rng: random.Random | None = None,
        env: Mapping[str, str],
    ) -> None:
        """``clock``: the system's unless a test drives one; ``env``: this job's
        environment (a successor is submitted with it)."""
        self.schedules = [_Schedule(s) for s in sources]
        self.job = job
        self.config = config
        self.clock = clock or Clock()
        self.rng = rng or random.Random()
        self.inbox: queue.Queue[object] = queue.Queue()
        self.wait = wait or self._wait_inbox
        self.finished = threading.Event()
        self.outcome = Outcome()
        log = AttemptLog(ledger, job)
        self.restarts = Restarts(
            job, folder, log, client, config, requeue_allowed, self.clock.wall, env
        )  # fmt: skip
        self.after = AfterNotice(job, folder, config, self.restarts, log, self.clock)

    # -- the other threads' side ------------------------------------------------------
    def start(self) -> threading.Thread:
        return quiet_thread(self._run_guarded, name="slurmpre-watch")

    def post_exit(self, code: int) -> None:
        """The training exited with ``code`` (called by the main thread)."""
        self.inbox.put(code)

    def stop(self) -> None:
        self.inbox.put(_STOP)

    def result(self) -> Outcome:
        """Wait for the watcher to finish (after `post_exit`; at most as long as it can take
        after the training exits), then its outcome."""
        self.finished.wait(max(self.config.window, self.config.time_warning) + 60.0)
        return self.outcome

    # -- the loop (the watcher's own thread) ---------------------------------------------
    def _wait_inbox(self, seconds: float) -> object:
        try:
            return self.inbox.get(timeout=seconds)
        except queue.Empty:
            return None

    def _run_guarded(self) -> None:
        try:
            self.run()
        except Exception as exc:  # noqa: BLE001 - the watcher must never take the training down
            LOG.info(f"watcher stopped by an unexpected error: {type(exc).__name__}: {exc}")
        finally:
            for schedule in self.schedules:
                try:
                    schedule.source.close()
                except Exception as exc:  # noqa: BLE001 - said; the job goes on ending
                    LOG.info(f"{schedule.source.name}: closing failed: {exc}")
            self.finished.set()

    def run(self) -> None:
        now = self.clock.monotonic()
        for schedule in self.schedules:
            schedule.due = now
        while not self.finished.is_set():
            now = self.clock.monotonic()
            for schedule in self.schedules:
                if now >= schedule.due:
                    schedule.due = now + self._poll(schedule)
            if self._step():
                return
            wait = min(s.due for s in self.schedules) - self.clock.monotonic()
            if self.after.notice is not None:
                wait = min(wait, self.config.pace.commit_poll)
            message = self.wait(max(wait, 0.01))
            if message is _STOP:
                return
            if isinstance(message, int):
                self.after.exited(message)
                if self.after.notice is None:
                    return  # the training ended with no notice: nothing to requeue
                if self._step():
                    return

    def _step(self) -> bool:
        """Act on a pending notice; True once the watcher is done."""
        outcome = self.after.step()
        if outcome is None:
            return False
        self.outcome = outcome
        return True

    # -- polling -----------------------------------------------------------------------
    def _interval(self, failures: int) -> float:
        """The interval, doubled per failure up to the longest backoff; never more than a
        quarter of the drain's requeue budget, so a drain during an outage is seen in time."""
        base = self.config.interval
        if failures:
            budget = (self.config.window - self.config.margin) / 4
            longest = max(min(self.config.pace.max_backoff, budget), base)
            base = min(longest, base * 2 ** min(failures, 6))
        return base * (1 + self.rng.uniform(-self.config.pace.jitter, self.config.pace.jitter))

    def _poll(self, schedule: _Schedule) -> float:
        """Ask one source; returns the seconds until it is asked again."""
        name = schedule.source.name
        try:
            found = schedule.source.poll()
        except SlurmpreError as exc:
            schedule.failures += 1
            if schedule.failures == 1 or schedule.failures % 10 == 0:
                first = str(exc).splitlines()[0]
                LOG.info(
                    f"{name}: Slurm does not answer ({first}); training goes on, "
                    f"retrying with backoff (failure {schedule.failures})"
                )
            return self._interval(schedule.failures)
        if schedule.failures:
            LOG.info(f"{name}: Slurm answers again after {schedule.failures} failed queries")
            schedule.failures = 0
        for notice in found:
            if self.after.notice is None and self.restarts.is_spare(notice.node):
                self.restarts.lose_spare(str(notice.node), notice.reason)  # trains on
            elif self.after.notice is None:
                self.after.begin(notice)
                if notice.kind == "grow" and self.after.notice is None:  # refused: later
                    schedule.source.refused()
            else:
                self.after.also_drained(notice)
        return schedule.source.every or self._interval(0)
