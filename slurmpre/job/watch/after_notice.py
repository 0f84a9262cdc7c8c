"""What the watcher does from the first notice on: ask every rank to checkpoint, hand
over or plan the restart, tell a script that goes on when to stop, and decide (by
`decide.decide`) when the job goes on elsewhere. Owned by the watcher's thread alone.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurmpre.errors import SlurmpreError
from slurmpre.folder import checkpoints, records, trust
from slurmpre.folder.layout import FolderLayout
from slurmpre.job.handover import overlap
from slurmpre.job.handover.inplace import Plan
from slurmpre.job.handover.restart import Restarts
from slurmpre.job.start.env import JobEnv
from slurmpre.job.start.options import WatchConfig
from slurmpre.job.watch.attempt_log import AttemptLog
from slurmpre.job.watch.decide import Action, Facts, decide
from slurmpre.job.watch.grow import GROW_WAIT
from slurmpre.job.watch.notice import Notice, write_notice
from slurmpre.job.watch.phases import Clock, Commit, Phase, Progress
from slurmpre.tier.in_place import InPlacePull

LOG = logging.getLogger(__name__)


@dataclass
class Outcome:
    """What the watcher did; read by the main thread once the watcher has finished."""

    notice: Notice | None = None
    action: Action | None = None  # REQUEUE or SKIP; None without a notice
    why: str = ""
    requeued: bool = False
    in_place: tuple[str, ...] | None = None  # the nodes kept, when restarting in place
    successor: str | None = None  # the job that takes over, instead of a requeue


class AfterNotice:
    def __init__(
        self,
        job: JobEnv,
        folder: Path,
        config: WatchConfig,
        restarts: Restarts,
        log: AttemptLog,
        clock: Clock,
    ) -> None:
        self.job, self.files, self.config = job, FolderLayout(folder), config
        self.own = job.files(folder)  # this attempt's control files
        self.restarts, self.log, self.clock = restarts, log, clock
        self._state = Progress()

    @property
    def notice(self) -> Notice | None:
        """The first notice, once there is one."""
        return self._state.notice

    def exited(self, code: int) -> None:
        self._state.exit_code = code

    def also_drained(self, notice: Notice) -> None:
        """Another notice after the first: a further node of the job drained."""
        state = self._state
        if notice.node is None or notice.node in state.drained:
            return
        state.drained.add(notice.node)
        LOG.info(f"another node drained: {notice.describe()}")
        self.log.add(records.Notice, **_notice_fields(notice, first=False))

    def begin(self, notice: Notice) -> None:
        """The first notice: every rank is asked to checkpoint, the restart planned."""
        if notice.kind == "grow":
            self._begin_grow(notice)
            return
        state = self._state
        state.notice = notice
        if notice.node:
            state.drained.add(notice.node)
        window = self.config.window if notice.kind == "drain" else self.config.time_warning
        budget = max(window - self.config.margin, 0.0)
        # The window began when Slurm drained the node, not when this watcher saw it.
        left = notice.since + budget - self.clock.wall()
        state.deadline = self.clock.monotonic() + max(left, 0.0)
        restart = self.restarts.plan(notice.kind, state.drained)
        successor = (
            self.config.restart == "successor"
            and restart.keep is None
            and self.restarts.requeue_allowed  # a job without --requeue is not restarted
        )
        # Make before break: with a successor on its way, or the next step starting
        # beside this one on a spare (`overlap`), a script that can checkpoint and go on
        # keeps training after its notice checkpoint, until told to stop.
        state.early = self.config.spare_overlap and overlap.may_start_early(
            restart, self.job, self.files.folder
        )
        self._enter(Phase.GOING_ON if successor or state.early else Phase.STOPPING)
        current = _latest(self.files.folder)
        state.step_at_notice = current.step if current else None
        own = self.own.listening
        state.listened_before = any(
            p != own and trust.marked(p) for p in self.files.listening_files()
        )
        late = self.clock.wall() - notice.since
        floor = self.restarts.floor()
        how = "restart in place" if restart.keep else "hand over" if successor else "requeue"
        LOG.info(
            f"preemption notice: {notice.describe()}, {late:.0f} s ago "
            f"(time from {notice.anchored_on}); asking every rank to checkpoint, "
            f"then {how} ({restart.why}) within {max(left, 0.0):.0f} s"
        )
        self._record_first(notice, restart, successor, budget, floor)
        if successor and self.restarts.hand_over("at the notice", sorted(state.drained)) is None:
            self._enter(Phase.STOPPING)  # no successor: stop at the checkpoint
        if state.early and not self.restarts.in_place(
            restart.why, notice.kind, state.drained, early=True
        ):
            state.early = False  # not asked: restart in place once this step has ended
            self._enter(Phase.STOPPING)
        if restart.keep and not successor:  # the kept nodes, or the next step's, pull its save
            at = records.AttemptId(self.job.restart_count, self.job.in_place)
            state.pull = InPlacePull(self.log.ledger, self.job.tag, at, self.job.nodes,
                                     restart.keep, beside=state.early)  # fmt: skip

    def _record_first(
        self, notice: Notice, restart: Plan, successor: bool, budget: float, floor: int | None
    ) -> None:
        """The first notice in the ledger, with the restart planned for it and what Slurm
        adds before the next step can start: a requeue waits for cred_expire + 1 (and then
        for nodes); in place, only the drained node's release; a successor, a free node."""
        expected: dict[str, int | None] = {"requeue": floor}
        if restart.keep:
            expected["in_place"] = 0
        elif successor:
            expected["successor"] = 0
        self.log.add(
            records.Notice,
            **_notice_fields(notice, first=True),
            step_at_notice=self._state.step_at_notice,
            drained_at=notice.since,
            deadline_from=notice.anchored_on,
            deadline_at=notice.since + budget,
            restart="in_place" if restart.keep else "successor" if successor else "requeue",
            restart_why=restart.why,
            requeue_floor_s=floor,
            expected_wait_s=expected,
        )

    def _begin_grow(self, notice: Notice) -> None:
        """A grow (`grow`): the bigger successor is submitted first, and only then is
        anything asked of the training (a grow the cluster refuses changes nothing). When
        it can start on idle nodes alone, this job trains on until it waits for its
        checkpoint (make before break), at most `grow.GROW_WAIT` seconds; otherwise
        every rank checkpoints and stops now, and it starts on their nodes."""
        if notice.grow_to is None:
            return
        done = self.restarts.grow(str(notice.reason), notice.grow_to, at_once=notice.at_once)
        if done is None:
            LOG.info("not growing: the bigger job could not be submitted; training goes on")
            return
        state = self._state
        state.notice = notice
        budget = GROW_WAIT if notice.at_once else self.config.window - self.config.margin
        state.deadline = self.clock.monotonic() + max(budget, 0.0)
        current = _latest(self.files.folder)
        state.step_at_notice = current.step if current else None
        LOG.info(f"growing: {notice.reason}; job {done.successor} takes over")
        self.log.add(
            records.Notice,
            **_notice_fields(notice, first=True),
            step_at_notice=state.step_at_notice,
            deadline_from="seen",
            deadline_at=self.clock.wall() + budget,
            restart="successor",
            restart_why="grow",
            expected_wait_s={"successor": 0},
            nodes=len(self.job.nodes),
            grow_to=notice.grow_to,
        )
        self._enter(Phase.GROWING if notice.at_once else Phase.STOPPING)

    def step(self) -> Outcome | None:
        """Act on the pending notice: the outcome once the job goes on (or will not)."""
        state = self._state
        if state.notice is None:
            return None
        facts = self._facts()
        decision = decide(facts)
        pull = state.pull  # the kept nodes pull the notice save (beside: `_last_save_left`)
        pulling = pull is not None and not pull.beside and pull.pending
        if decision.action is Action.WAIT or (pulling and not facts.past_deadline):
            return None
        if state.early and not (facts.exit_code is not None or facts.past_deadline
                                or self.log.saved_to_stop()):  # fmt: skip
            return None  # the step started early waits; this one stops at its last checkpoint
        if decision.action is Action.SKIP:
            LOG.info(f"not requeuing: {decision.why}")
            self.log.add(records.RequeueSkipped, why=decision.why)
            self.restarts.call_off()
            self._enter(Phase.ENDED)
            return Outcome(state.notice, Action.SKIP, decision.why)
        if state.early and not self._last_save_left(facts.past_deadline):
            return None  # the next step takes over from its last save: it leaves the nodes
        done = self.restarts.in_place(
            decision.why, state.notice.kind, state.drained, started=state.early
        )
        if done is None:
            done = self.restarts.go_on(decision.why, state.drained)
        if done is None:
            return None  # the requeue failed: the next round tries again
        on_node = state.commit is not None and state.commit.on_node
        if done.successor and self._stopped_at_its_checkpoint() and not on_node:
            self.restarts.end_step(f"job {done.successor} takes over from its checkpoint")
        if state.phase.trains_on:
            # A script still going on (the deadline came first) must stop now: the job that
            # takes over waits for it to end.
            self._enter(Phase.STOPPING)
        self._enter(Phase.ENDED)
        return Outcome(
            state.notice,
            done.action,
            done.why or decision.why,
            done.requeued,
            done.in_place,
            done.successor,
        )

    def _last_save_left(self, late: bool) -> bool:
        """The step started beside this one (a hot spare's) takes over from this one's last
        save; with the tier, this step ends once every node of that step holds it, or it is
        in the folder, or at the deadline (`InPlacePull.settled`)."""
        state, mine = self._state, self.log.own()
        saves = [r.step for r in mine if isinstance(r, records.Saved) and r.after_notice]
        if state.pull is None or state.notice is None or not saves:
            return True
        committed = any(isinstance(r, records.Checkpoint) and (r.step or -1) >= saves[-1]
                        for r in mine)  # fmt: skip
        keep = self.restarts.plan(state.notice.kind, state.drained).keep or ()
        return state.pull.settled(saves[-1], keep, committed, late)

    def _stopped_at_its_checkpoint(self) -> bool:
        """The training committed the checkpoint it stops at, and has not exited yet: the
        step has nothing left to do. Not for a script that went on after its notice
        checkpoint and was told to stop after it: its last save may still be writing."""
        state = self._state
        if state.commit is None or state.exit_code is not None:
            return False
        told = state.told_at is not None and state.told_at <= state.commit.at
        return not state.went_on or told

    def _enter(self, phase: Phase) -> None:
        """The one way from phase to phase. GOING_ON and STOPPING (again, when it is asked
        again) write the notice file every rank reads: checkpoint, or checkpoint and stop."""
        state = self._state
        state.phase = phase
        if state.notice is None or phase not in (Phase.GOING_ON, Phase.STOPPING):
            return
        now = self.clock.monotonic()
        if phase is Phase.STOPPING and state.told_at is None:
            state.told_at = now
        if state.asked_at is None:
            state.asked_at = now
        stop = phase is Phase.STOPPING
        try:
            path = self.own.notice
            write_notice(path, dataclasses.replace(state.notice, stop=stop))
        except (OSError, trust.Untrusted) as exc:
            LOG.info(f"could not write the notice file: {exc}")

    def _tell_to_stop(self, goes_on: bool) -> None:
        """A script that went on training after its notice checkpoint stops (with a last
        checkpoint) once its successor waits for it, or as the deadline nears: the window
        less the margin, less what its notice checkpoint took (and a poll)."""
        state = self._state
        if not state.phase.trains_on or not goes_on or state.commit is None:
            return
        if state.deadline is None:
            return
        if state.stop_at is None:
            took = self._checkpoint_seconds()
            state.stop_at = state.deadline - took - 2 * self.config.pace.commit_poll
        why = None
        if self.restarts.successor is not None and self._successor_waiting():
            why = f"job {self.restarts.successor} is ready to take over"
        elif state.early and self._successor_waiting():
            why = "the next step, started beside this one, is ready to take over"
        elif self.clock.monotonic() >= state.stop_at:
            why = "the deadline nears"
        if why is None:
            return
        self._ask_to_stop(why)

    def _stop_for_the_bigger_job(self) -> None:
        """A grow whose successor started on idle nodes: once it waits for this job's
        checkpoint, every rank checkpoints and stops (the deadline does it otherwise)."""
        notice = self._state.notice
        if self._state.phase is not Phase.GROWING or notice is None:
            return
        if not self._successor_waiting():
            return
        why = f"job {self.restarts.successor} waits on {notice.grow_to} nodes"
        self._ask_to_stop(why)

    def _ask_to_stop(self, why: str) -> None:
        """The notice file turns to stop: a script still training checkpoints and stops."""
        self._enter(Phase.STOPPING)
        LOG.info(f"asking the training to checkpoint and stop: {why}")
        self.log.add(records.Stopping, why=why, asked_at=self.clock.wall())

    def _checkpoint_seconds(self) -> float:
        """How long the notice checkpoint took, as the watcher saw it: from the notice
        file to the commit, which holds the ranks' agreeing, the step they were in, and
        the save itself (a final checkpoint takes as long)."""
        state = self._state
        if state.commit is None or state.asked_at is None:
            return 0.0
        return max(0.0, state.commit.at - state.asked_at)

    def _successor_waiting(self) -> bool:
        """The successor (or its twin on standard nodes: `twins`) waits for this job, or
        the next step started early (`overlap`) waits for this one."""
        ready = {self.restarts.successor, self.restarts.twin} - {None}
        return self.log.waited_for({str(j) for j in ready}, next_step=self._state.early)

    def _facts(self) -> Facts:
        state = self._state
        if state.commit is None:
            found = self._committed_since_notice()
            if found is not None:
                step, path, on_node = found
                state.commit = Commit(step, path, self.clock.monotonic(), on_node)
                LOG.info(f"checkpoint of step {step} committed after the notice: {path}")
                seen = self.clock.wall()
                self.log.add(records.Committed, step=step, path=path, committed_seen_at=seen)
                self.restarts.place_late()  # a placement that waited for the rate
        goes_on = trust.marked(self.own.goes_on)
        state.went_on = state.went_on or goes_on
        self._tell_to_stop(goes_on)
        self._stop_for_the_bigger_job()
        now = self.clock.monotonic()
        return Facts(
            goes_on=goes_on and state.phase.trains_on,
            listening=trust.marked(self.own.listening),
            taken=trust.marked(self.own.taken),
            committed=state.commit is not None,
            since_commit=None if state.commit is None else now - state.commit.at,
            exit_code=state.exit_code,
            past_deadline=state.deadline is not None and now >= state.deadline,
            exit_grace=self.config.pace.exit_grace,
            listened_before=state.listened_before,
            handed_over=self.restarts.successor is not None or state.early,
        )

    def _committed_since_notice(self) -> tuple[int | None, str, bool] | None:
        """(step, path, saved on the nodes) of the checkpoint that answers the notice."""
        # A script that asks preemption_requested() checkpoints on the notice itself:
        # wait for that one, not for a periodic save that lands first, or the steps
        # it trains between the two would be lost.
        state = self._state
        listening = trust.marked(self.own.listening)
        pull = state.pull if self.restarts.successor is None and not state.early else None
        saved = self.log.notice_save(pulled=pull is not None or self.restarts.successor is not None)
        if pull is not None and isinstance(saved, records.Saved):  # in place, on the nodes
            late = state.deadline is not None and self.clock.monotonic() >= state.deadline
            pulled = pull.poll(saved.step, late)
            if pulled is None:
                return None
            if not pulled:  # the next step waits for the flush's commit
                saved = self.log.notice_save(pulled=False)
        if saved is not None:
            return saved.step, saved.path, isinstance(saved, records.Saved)
        if listening:
            return None
        found = _latest(self.files.folder)
        before = state.step_at_notice
        if found is not None and found.step is not None and (before is None or found.step > before):
            return found.step, str(found.path), False
        return None


def _latest(folder: Path) -> checkpoints.Checkpoint | None:
    try:
        return checkpoints.latest(folder).checkpoint
    except SlurmpreError:
        return None


def _notice_fields(notice: Notice, *, first: bool) -> dict[str, Any]:
    return {"kind": notice.kind, "node": notice.node, "reason": notice.reason,
            "seen_at": notice.seen_at, "first": first}  # fmt: skip
