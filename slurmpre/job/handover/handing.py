"""Handing over to another job: the successor that takes over after a notice, the
bigger one a grow asks for, and their twins on standard nodes (`twins`); where each
trains (`placing`), and each recorded in the ledger. The in-place restart and Slurm's
requeue build on it in `restart`."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from slurmpre.errors import SlurmpreError
from slurmpre.folder import records
from slurmpre.folder.layout import FolderLayout
from slurmpre.job.handover.placing import Placement, held_back, place
from slurmpre.job.handover.slots import submit_slot
from slurmpre.job.handover.successor import submit_successor
from slurmpre.job.start.env import JobEnv
from slurmpre.job.start.options import WatchConfig
from slurmpre.job.watch.attempt_log import AttemptLog
from slurmpre.job.watch.decide import Action
from slurmpre.job.watch.grow import GROW_WAIT, TWIN_AFTER
from slurmpre.placement.policy import STANDARD
from slurmpre.slurm.client import SlurmClient

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class Done:
    """How the job went on: the watcher's outcome."""

    action: Action  # REQUEUE (it goes on, one way or another) or SKIP
    requeued: bool = False
    in_place: tuple[str, ...] | None = None  # the nodes kept
    successor: str | None = None  # the job that took over
    why: str | None = None  # when it is not the decision's own


class Successors:
    """This job's hand-overs to other jobs: at most one successor (and its twin)."""

    def __init__(
        self,
        job: JobEnv,
        folder: Path,
        log: AttemptLog,
        client: SlurmClient,
        config: WatchConfig,
        requeue_allowed: bool,
        wall: Callable[[], float],
        env: Mapping[str, str],
    ) -> None:
        self.env = env  # this job's own: a successor is submitted with it
        self.job, self.folder, self.log, self.client = job, folder, log, client
        self.config, self.requeue_allowed = config, requeue_allowed
        self.wall = wall
        self.successor_refused = False  # then requeue, as without successors
        self.successor: str | None = None  # the job this one handed over to
        self.twin: str | None = None  # ... and its twin on standard nodes (`twins`)
        self.late: list[str] | None = None  # placement waits for the rate (`place_late`)

    def call_off(self) -> None:
        """The training finished its work after all: the successor has nothing to do."""
        for job in (self.successor, self.twin):
            if job is None:
                continue
            try:
                self.client.cancel(job)
            except SlurmpreError as exc:
                LOG.info(f"cannot cancel job {job} ({first_line(exc)}): it finds no work")
                continue
            LOG.info(f"cancelled job {job}: the training finished its work here")

    def hand_over(self, why: str, exclude: list[str]) -> Done | None:
        """Submit the successor, once this job cannot be requeued; None (this job stays
        requeueable, and is requeued instead) when either step fails. Once only: a
        second call answers with the successor already submitted."""
        if self.successor is not None:
            return Done(Action.REQUEUE, successor=self.successor)
        if self.successor_refused:
            return None
        try:
            self.client.set_requeue(self.job.job_id, False)
        except SlurmpreError as exc:
            LOG.info(f"cannot make this job non-requeueable ({first_line(exc)}): requeuing it")
            self.successor_refused = True
            return None
        placed = self.place(exclude)
        if placed is not None and placed.situation.rate is None and placed.args == ():
            # No rate measured yet (no checkpoint since the run began): the successor goes
            # as the script says, and where the run goes on is decided once the notice
            # checkpoint gives the rate (`place_late`).
            self.late, placed = exclude, None
        try:
            successor = self._submit(exclude, placed.args if placed is not None else ())
        except SlurmpreError as exc:
            LOG.info(f"the successor job was refused ({first_line(exc)}): requeuing instead")
            self.successor_refused = True
            self._requeueable_again()
            return None
        self.successor = successor
        where = f", not on {', '.join(exclude)}" if exclude else ""
        if placed is not None:
            where += f", on {placed.decision.where} nodes: {placed.decision.why}"
        LOG.info(f"job {successor} takes over from job {self.job.tag} ({why}){where}")
        self._record(successor, exclude, why)
        if placed is not None:  # after the successor's record: the first is the successor
            self._record_placement(placed, self._twin(placed, exclude))
        return Done(Action.REQUEUE, successor=successor)

    def grow(self, why: str, nodes: int, *, at_once: bool) -> Done | None:
        """Hand over to a bigger successor (`slurmpre.job.watch.grow`): the recorded script
        on ``nodes`` nodes, and its twin of the script's own shape held until the bigger one
        should have started (the idle nodes may be taken meanwhile: `twins`, the first to
        start trains). None, and nothing changed, when this job may not hand over or sbatch
        refuses the bigger job."""
        if self.successor is not None:
            return Done(Action.REQUEUE, successor=self.successor)
        if self.config.restart != "successor" or not self.requeue_allowed:
            return None
        unrequeued = True  # the job was made non-requeueable: undone if the grow fails
        try:
            self.client.set_requeue(self.job.job_id, False)
        except SlurmpreError as exc:
            # Slurm 22.05 refuses updates of a job it has resized until accounting gives
            # it a DB index ("the DB index is being set": minutes on the sandbox, which
            # runs no slurmdbd). A grow, unlike a drain, kills nothing: this job ends by
            # itself once it has handed over, and an attempt Slurm might still start
            # finds the hand-over in the ledger and does not train (`resume.agree`).
            unrequeued = False
            LOG.info(
                f"cannot make this job non-requeueable ({first_line(exc)}): growing anyway "
                "(a requeued attempt finds the hand-over and does not train)"
            )
        try:
            # ... and the spares the script holds beside its training nodes (`spare_nodes`)
            held = nodes + self.config.spare_nodes
            successor = self._submit([], (f"--nodes={held}",))
        except SlurmpreError as exc:
            LOG.info(f"the job on {nodes} nodes was refused ({first_line(exc)}): not growing")
            if unrequeued:
                self._requeueable_again()
            return None
        self.successor = successor
        self._record(successor, [], why)
        after = round((GROW_WAIT if at_once else 0.0) + TWIN_AFTER)
        try:
            self.twin = self._submit([], (f"--begin=now+{after}",))
        except SlurmpreError as exc:
            LOG.info(f"the twin of the script's own shape was refused ({first_line(exc)})")
            return Done(Action.REQUEUE, successor=successor)
        self._record(
            self.twin,
            [],
            f"the twin of the script's own shape, in {after} s unless job {successor} starts",
        )
        return Done(Action.REQUEUE, successor=successor)

    def _requeueable_again(self) -> None:
        """After a refused hand-over: this job goes on as it was, requeueable."""
        try:
            self.client.set_requeue(self.job.job_id, True)
        except SlurmpreError as exc:
            LOG.info(f"cannot make this job requeueable again ({first_line(exc)})")

    def _submit(self, exclude: list[str], extra: Sequence[str]) -> str:
        """The recorded script as a job that takes over from this one, in turn with the
        user's other submissions; its id. An array task's is that task of a new array job,
        named as its records will name it (``125_3``), so the chain reads through (and its
        script is recorded above its ``<checkpoint_dir>/task-<id>``)."""
        array = self.job.array_task_id is not None
        layout = FolderLayout(self.folder.parent if array else self.folder)
        with submit_slot(self.env):
            submitted = submit_successor(layout, self.job, exclude, env=self.env, extra=extra)
        task = self.job.array_task_id
        return f"{submitted}_{task}" if task else submitted

    def place(self, exclude: list[str]) -> Placement | None:
        """Where the successor trains, when the spec's goals may move it (else None: the
        recorded script's own constraint). Slurm not answering keeps it there too."""
        goals = self.config.goals
        if not goals.may_move:
            return held_back(goals, self.log.records(), now=self.wall())
        try:
            nodes = self.client.nodes()
        except SlurmpreError as exc:
            LOG.info(
                f"cannot list the nodes ({first_line(exc)}): the successor keeps its constraint"
            )
            return None
        try:
            return place(
                goals,
                self.log.records(),
                nodes,
                exclude,
                now=self.wall(),
                needed=self.config.min_nodes,
            )
        except SlurmpreError as exc:
            LOG.info(f"cannot decide where to go on ({first_line(exc)}): keeping the constraint")
            return None

    def place_late(self) -> None:
        """Once the notice checkpoint is committed (the rate is known): the placement the
        hand-over could not make. The successor is queued already, on the script's own
        nodes; a run that must move gets its twin on standard nodes at once, one that may
        wait gets it held, as at a hand-over (`twins`)."""
        if self.late is None or self.successor is None:
            return
        exclude, self.late = self.late, None
        placed = self.place(exclude)
        if placed is None:
            return
        if placed.decision.where == STANDARD:
            placed = replace(placed, twin_at=self.wall(), twin_args=placed.args)
        LOG.info(f"where the run goes on, now that its rate is known: {placed.decision.why}")
        self._record_placement(placed, self._twin(placed, exclude))

    def _twin(self, placed: Placement, exclude: list[str]) -> str | None:
        """The successor's twin on standard nodes, held until ``placed.twin_at`` (`twins`);
        None when there is none, or sbatch refused it (the successor waits as before)."""
        if placed.twin_at is None:
            return None
        try:
            twin = self._submit(exclude, placed.twin_args)
        except SlurmpreError as exc:
            LOG.info(f"the standard-node twin was refused ({first_line(exc)}): the successor waits")
            return None
        self.twin = twin
        why = f"the twin on standard nodes, from {placed.twin_at:.0f} if none has started"
        self._record(twin, exclude, why)
        LOG.info(
            f"job {twin} waits on standard nodes until {placed.twin_at - self.wall():.0f} s "
            f"from now, in case no preemptible node is free by then: the first to start trains"
        )
        return twin

    def _record(self, successor: str, exclude: Sequence[str], why: str) -> None:
        """A job submitted to take over from this one, in the ledger."""
        self.log.add(
            records.Successor,
            successor=successor,
            excluded=tuple(exclude),
            why=why,
            submitted_at=self.wall(),
        )

    def _record_placement(self, placed: Placement, twin: str | None = None) -> None:
        d, s = placed.decision, placed.situation
        self.log.add(
            records.Placed,
            where=d.where,
            why=d.why,
            decided_at=s.now,
            steps_done=s.steps_done,
            total_steps=s.total_steps,
            deadline_at=s.deadline,
            slack_s=d.slack_s,
            line_step=d.line_step,
            rate=s.rate,
            preemptions=s.preemptions,
            twin=twin,
            twin_from=placed.twin_at if twin else None,
        )


def first_line(exc: BaseException) -> str:
    """An error in one line: its first, and the last one of what the command said."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    return lines[0] if len(lines) == 1 else f"{lines[0]}: {lines[-1]}"
