"""The watcher: turn the provider's drain into a notice, the notice into a checkpoint, then requeue.

One watcher per job, on node 0, in a thread of its own that alone owns its
state. It asks every notice source on its own schedule (the drain source:
one Slurm query for all the job's nodes per interval, default 5 s with
jitter; a source that fails backs off on its own, up to a minute, without
slowing the others). A node of the job entering DRAIN, or the time-limit
warning, is a notice for the whole job: the watcher publishes the notice file
for every rank and then decides, by `requeue.decide`, when to requeue: after
the checkpoint taken on the notice, when the training exits, or by the
deadline, which counts from the drain's own time as Slurm stamped it. It never
takes the training down.

The wrapper's main thread talks to it only through `post_exit` and reads the
outcome after `finished` is set.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurmpre.errors import SlurmpreError
from slurmpre.folder import checkpoints, records, trust
from slurmpre.folder.layout import FolderLayout
from slurmpre.folder.ledger import Ledger
from slurmpre.job.handover.restart import Restarts
from slurmpre.job.start.env import JobEnv
from slurmpre.job.start.options import WatchConfig
from slurmpre.job.watch.decide import Action, Facts, decide
from slurmpre.job.watch.notice import (
    Notice,
    NoticeSource,
    listening_path,
    notice_path,
    taken_path,
    write_notice,
)
from slurmpre.signals import quiet_thread
from slurmpre.slurm.client import SlurmClient


@dataclass
class _Schedule:
    """One source's own polling schedule and failure count."""

    source: NoticeSource
    due: float = 0.0
    failures: int = 0


@dataclass
class Outcome:
    """What the watcher did; read by the main thread once `finished` is set."""

    notice: Notice | None = None
    action: Action | None = None  # REQUEUE or SKIP; None without a notice
    why: str = ""
    requeued: bool = False
    in_place: tuple[str, ...] | None = None  # the nodes kept, when restarting in place
    successor: str | None = None  # the job that takes over, instead of a requeue


@dataclass
class _State:
    notice: Notice | None = None
    deadline: float | None = None  # on the monotonic clock
    step_at_notice: int | None = None
    committed: tuple[int | None, str] | None = None
    committed_at: float | None = None  # monotonic
    exit_code: int | None = None
    drained: set[str] = field(default_factory=set)
    listened_before: bool = False  # an earlier attempt's script asked preemption_requested()
    stop_sent: bool = False  # the notice file says stop (a script that goes on stops)
    stop_at: float | None = None  # monotonic: when a script that goes on must stop
    notice_written: float | None = None  # wall clock: the notice file first written
    committed_wall: float | None = None  # wall clock: its checkpoint seen committed


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
        say: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        wait: Callable[[float], object] | None = None,
        rng: random.Random | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """``env``: this job's environment (a successor is submitted with it)."""
        self.schedules = [_Schedule(s) for s in sources]
        self.job = job
        self.folder = folder
        self.ledger = ledger
        self.client = client
        self.config = config
        self.say = say
        self.clock = clock
        self.wall = wall
        self.rng = rng or random.Random()
        self.inbox: queue.Queue[object] = queue.Queue()
        self.wait = wait or self._wait_inbox
        self.finished = threading.Event()
        self.outcome = Outcome()
        self._state = _State()
        self.restarts = Restarts(
            job, folder, ledger, client, config, requeue_allowed, say, self.wall, self._ledger,
            os.environ if env is None else env,
        )  # fmt: skip
        self._said_failing: set[str] = set()

    # -- the other threads' side ------------------------------------------------------
    def start(self) -> threading.Thread:
        return quiet_thread(self._run_guarded, name="slurmpre-watch")

    def post_exit(self, code: int) -> None:
        """The training exited with ``code`` (called by the main thread)."""
        self.inbox.put(code)

    def stop(self) -> None:
        self.inbox.put(_STOP)

    def result(self, timeout: float) -> Outcome:
        """Wait for the watcher to finish (after `post_exit`), then its outcome."""
        self.finished.wait(timeout)
        return self.outcome

    def longest_wait(self) -> float:
        """An upper bound of how long the watcher can take after the training exits."""
        return max(self.config.window, self.config.time_warning) + 60.0

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
            self.say(f"watcher stopped by an unexpected error: {type(exc).__name__}: {exc}")
        finally:
            for schedule in self.schedules:
                close = getattr(schedule.source, "close", None)
                if close is not None:
                    try:
                        close()
                    except Exception as exc:  # noqa: BLE001 - said; the job goes on ending
                        self.say(f"{schedule.source.name}: closing failed: {exc}")
            self.finished.set()

    def run(self) -> None:
        now = self.clock()
        for schedule in self.schedules:
            schedule.due = now
        while not self.finished.is_set():
            now = self.clock()
            for schedule in self.schedules:
                if now >= schedule.due:
                    schedule.due = now + self._poll(schedule)
            if self._step():
                return
            wait = min(s.due for s in self.schedules) - self.clock()
            if self._state.notice is not None:
                wait = min(wait, self.config.commit_poll)
            message = self.wait(max(wait, 0.01))
            if message is _STOP:
                return
            if isinstance(message, int):
                self._state.exit_code = message
                if self._state.notice is None:
                    return  # the training ended with no notice: nothing to requeue
                if self._step():
                    return

    # -- polling -----------------------------------------------------------------------
    def _interval(self, failures: int) -> float:
        """The interval, doubled per failure up to the longest backoff; never more than a
        quarter of the drain's requeue budget, so a drain during an outage is seen in time."""
        base = self.config.interval
        if failures:
            budget = (self.config.window - self.config.margin) / 4
            longest = max(min(self.config.max_backoff, budget), base)
            base = min(longest, base * 2 ** min(failures, 6))
        return base * (1 + self.rng.uniform(-self.config.jitter, self.config.jitter))

    def _poll(self, schedule: _Schedule) -> float:
        """Ask one source; returns the seconds until it is asked again."""
        name = schedule.source.name
        try:
            found = schedule.source.poll()
        except SlurmpreError as exc:
            schedule.failures += 1
            if schedule.failures == 1 or schedule.failures % 10 == 0:
                first = str(exc).splitlines()[0]
                self.say(
                    f"{name}: Slurm does not answer ({first}); training goes on, "
                    f"retrying with backoff (failure {schedule.failures})"
                )
            return self._interval(schedule.failures)
        if schedule.failures:
            self.say(f"{name}: Slurm answers again after {schedule.failures} failed queries")
            schedule.failures = 0
        every = getattr(schedule.source, "every", None)
        for notice in found:
            if self._state.notice is None:
                self._on_notice(notice)
            elif notice.node is not None and notice.node not in self._state.drained:
                self._state.drained.add(notice.node)
                self.say(f"another node drained: {notice.describe()}")
                self._ledger(records.Notice, **_notice_fields(notice, first=False))
        return every if every else self._interval(0)

    # -- after a notice ---------------------------------------------------------------
    def _on_notice(self, notice: Notice) -> None:
        state = self._state
        state.notice = notice
        if notice.node:
            state.drained.add(notice.node)
        window = self.config.window if notice.kind == "drain" else self.config.time_warning
        budget = max(window - self.config.margin, 0.0)
        # The window began when Slurm drained the node, not when this watcher saw it.
        left = notice.since + budget - self.wall()
        state.deadline = self.clock() + max(left, 0.0)
        restart = self.restarts.plan(notice.kind, state.drained)
        successor = (
            self.config.restart == "successor"
            and restart.keep is None
            and self.restarts.requeue_allowed  # a job without --requeue is not restarted
        )
        # Make before break: with a successor on its way, a script that can checkpoint
        # and go on keeps training after its notice checkpoint, until told to stop.
        self._publish(notice, stop=not successor)
        current = _latest(self.folder)
        state.step_at_notice = current.step if current else None
        own = listening_path(self.folder, self.job.tag, self.job.attempt)
        state.listened_before = any(
            p != own and trust.marked(p) for p in FolderLayout(self.folder).listening_files()
        )
        late = self.wall() - notice.since
        floor = self.restarts.floor()
        how = "restart in place" if restart.keep else "hand over" if successor else "requeue"
        self.say(
            f"preemption notice: {notice.describe()}, {late:.0f} s ago "
            f"(time from {notice.anchored_on}); asking every rank to checkpoint, "
            f"then {how} ({restart.why}) within {max(left, 0.0):.0f} s"
        )
        # What Slurm itself adds before the next step can start, beyond the job's own
        # start-up: a requeue waits for cred_expire + 1 (and then for nodes); an
        # in-place restart only for the release of the drained node; a successor for
        # a free node and its predecessor's end.
        expected: dict[str, int | None] = {"requeue": floor}
        if restart.keep:
            expected["in_place"] = 0
        elif successor:
            expected["successor"] = 0
        self._ledger(
            records.Notice,
            **_notice_fields(notice, first=True),
            step_at_notice=state.step_at_notice,
            drained_at=notice.since,
            deadline_from=notice.anchored_on,
            deadline_at=notice.since + budget,
            restart="in_place" if restart.keep else "successor" if successor else "requeue",
            restart_why=restart.why,
            requeue_floor_s=floor,
            expected_wait_s=expected,
        )
        if successor and self.restarts.hand_over("at the notice", sorted(state.drained)) is None:
            self._publish(notice, stop=True)  # no successor: stop at the checkpoint

    def _publish(self, notice: Notice, *, stop: bool) -> None:
        """Write the notice file every rank reads (again, when it turns to stop)."""
        self._state.stop_sent = stop
        if self._state.notice_written is None:
            self._state.notice_written = self.wall()
        try:
            write_notice(
                notice_path(self.folder, self.job.tag, self.job.attempt),
                dataclasses.replace(notice, stop=stop),
            )
        except (OSError, trust.Untrusted) as exc:
            self.say(f"could not write the notice file: {exc}")

    def _tell_to_stop(self, goes_on: bool) -> None:
        """A script that went on training after its notice checkpoint stops (with a last
        checkpoint) once its successor waits for it, or as the deadline nears: the window
        less the margin, less what its notice checkpoint took (and a poll)."""
        state = self._state
        notice = state.notice
        if notice is None or state.stop_sent or not goes_on or state.committed is None:
            return
        if state.deadline is None:
            return
        if state.stop_at is None:
            took = self._checkpoint_seconds()
            state.stop_at = state.deadline - took - 2 * self.config.commit_poll
        why = None
        if self.restarts.successor is not None and self._successor_waiting():
            why = f"job {self.restarts.successor} is ready to take over"
        elif self.clock() >= state.stop_at:
            why = "the deadline nears"
        if why is None:
            return
        self._publish(notice, stop=True)
        self.say(f"asking the training to checkpoint and stop: {why}")
        self._ledger(records.Stopping, why=why, asked_at=self.wall())

    def _checkpoint_seconds(self) -> float:
        """How long the notice checkpoint took, as the watcher saw it: from the notice
        file to the commit, which holds the ranks' agreeing, the step they were in, and
        the save itself (a final checkpoint takes as long)."""
        state = self._state
        if state.committed_wall is None or state.notice_written is None:
            return 0.0
        return max(0.0, state.committed_wall - state.notice_written)

    def _successor_waiting(self) -> bool:
        successor = self.restarts.successor
        return any(
            isinstance(r, records.Waiting) and r.job == successor and r.predecessor == self.job.tag
            for r in self._records()
        )

    def _facts(self) -> Facts:
        state = self._state
        tag, attempt = self.job.tag, self.job.attempt
        if state.committed is None:
            state.committed = self._committed_since_notice()
            if state.committed is not None:
                step, path = state.committed
                state.committed_at = self.clock()
                state.committed_wall = self.wall()
                self.say(f"checkpoint of step {step} committed after the notice: {path}")
                self._ledger(records.Committed, step=step, path=path, committed_seen_at=self.wall())
        goes_on = trust.marked(FolderLayout(self.folder).goes_on(tag, attempt))
        self._tell_to_stop(goes_on)
        now = self.clock()
        return Facts(
            goes_on=goes_on and not state.stop_sent,
            listening=trust.marked(listening_path(self.folder, tag, attempt)),
            taken=trust.marked(taken_path(self.folder, tag, attempt)),
            committed=state.committed is not None,
            since_commit=None if state.committed_at is None else now - state.committed_at,
            exit_code=state.exit_code,
            past_deadline=state.deadline is not None and now >= state.deadline,
            exit_grace=self.config.exit_grace,
            listened_before=state.listened_before,
            handed_over=self.restarts.successor is not None,
        )

    def _step(self) -> bool:
        """Act on a pending notice; True once the watcher is done."""
        if self._state.notice is None:
            return False
        decision = decide(self._facts())
        if decision.action is Action.WAIT:
            return False
        if decision.action is Action.SKIP:
            self.say(f"not requeuing: {decision.why}")
            self._ledger(records.RequeueSkipped, why=decision.why)
            self.restarts.call_off()
            self._finish(Action.SKIP, decision.why)
            return True
        kind = self._state.notice.kind
        done = self.restarts.in_place(decision.why, kind, self._state.drained)
        if done is None:
            done = self.restarts.go_on(decision.why, self._state.drained)
        if done is None:
            return False  # the requeue failed: the next round tries again
        if not self._state.stop_sent:
            # A script still going on (the deadline came first) must stop now: the job that
            # takes over waits for it to end.
            self._publish(self._state.notice, stop=True)
        self._finish(
            done.action,
            done.why or decision.why,
            requeued=done.requeued,
            in_place=done.in_place,
            successor=done.successor,
        )
        return True

    def _finish(
        self,
        action: Action,
        why: str,
        *,
        requeued: bool = False,
        in_place: tuple[str, ...] | None = None,
        successor: str | None = None,
    ) -> None:
        self.outcome = Outcome(self._state.notice, action, why, requeued, in_place, successor)

    def _committed_since_notice(self) -> tuple[int | None, str] | None:
        # A script that asks preemption_requested() checkpoints on the notice itself:
        # wait for that one, not for a periodic save that lands first, or the steps
        # it trains between the two would be lost.
        listening = trust.marked(listening_path(self.folder, self.job.tag, self.job.attempt))
        this = records.AttemptId(self.job.restart_count, self.job.in_place)
        for record in reversed(self._records()):
            if (
                isinstance(record, records.Checkpoint)
                and record.job == self.job.tag  # every successor's first attempt is 0
                and record.attempt_id == this
                and record.after_notice
            ):
                return record.step, record.path
        if listening:
            return None
        found = _latest(self.folder)
        before = self._state.step_at_notice
        if found is not None and found.step is not None and (before is None or found.step > before):
            return found.step, str(found.path)
        return None

    def _records(self) -> list[records.Record]:
        try:
            return self.ledger.records()
        except SlurmpreError as exc:
            self.say(f"could not read the ledger: {exc}")
            return []

    def _ledger(self, of: type[records.AttemptRecord], **fields: Any) -> None:
        """Append a record of this attempt: one ``of`` that type, with ``fields``."""
        try:
            self.ledger.append(
                of(
                    job=self.job.tag,
                    attempt=self.job.restart_count,
                    in_place=self.job.in_place,
                    **fields,
                )
            )
        except SlurmpreError as exc:
            self.say(f"could not write the ledger (watching goes on): {exc}")


def _latest(folder: Path) -> checkpoints.Checkpoint | None:
    try:
        return checkpoints.latest(folder).checkpoint
    except SlurmpreError:
        return None


def _notice_fields(notice: Notice, *, first: bool) -> dict[str, Any]:
    return {
        "kind": notice.kind,
        "node": notice.node,
        "reason": notice.reason,
        "seen_at": notice.seen_at,
        "first": first,
    }
