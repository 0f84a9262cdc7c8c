"""How a job goes on once a notice ends its allocation (`after_notice` decides when), in
order of preference: restart in place, hand over to a successor (`handing`), or Slurm's
requeue; each recorded in the ledger. A job submitted without ``--requeue`` is not
requeued.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from functools import cached_property

from slurmpre import environment
from slurmpre.errors import SlurmpreError
from slurmpre.folder import records, trust
from slurmpre.folder.layout import FolderLayout
from slurmpre.job.handover.handing import Done, Successors, first_line
from slurmpre.job.handover.inplace import (
    Plan,
    Request,
    plan,
    write_request,
    write_spares,
)
from slurmpre.job.handover.slots import submit_slot
from slurmpre.job.watch.decide import Action
from slurmpre.slurm.parse import requeue_floor

LOG = logging.getLogger(__name__)


class Restarts(Successors):
    """How this job goes on: in place, by a hand-over (`Successors`) or requeued."""

    @cached_property
    def spares_lost(self) -> set[str]:
        """Spares that drained while the step trained (`lose_spare`)."""
        return set()

    def plan(self, kind: str, drained: Iterable[str]) -> Plan:
        """Whether the job can go on in place after losing ``drained``, and why."""
        return plan(
            kind=kind,
            nodes=self.job.nodes,
            drained=set(drained) | self.spares_lost,
            batch_host=self.job.batch_host,
            min_nodes=self.config.min_nodes,
            enabled=self.config.in_place,
            spares=self.job.spares,
        )

    def is_spare(self, node: str | None) -> bool:
        """``node`` is a spare of this step's job (`spare_nodes`), not one it trains on, and
        its loss leaves the job whole: not the batch host, whose drain ends the allocation."""
        return node is not None and node in self.job.spares and node != self.job.batch_host

    def lose_spare(self, node: str, reason: str | None) -> None:
        """A spare drained while the step trains: ask the supervisor to release it from the
        job (before the provider removes it, which would end the whole allocation); the
        training goes on, and no later plan counts on it."""
        if node in self.spares_lost:
            return
        self.spares_lost.add(node)
        left = [s for s in self.job.spares if s not in self.spares_lost]
        try:
            path = FolderLayout(self.folder).spare_release(self.job.tag, self.job.attempt)
            write_spares(path, self.spares_lost)
        except (OSError, trust.Untrusted) as exc:
            LOG.info(f"spare {node} drained; cannot ask for its release ({exc})")
            return
        LOG.info(
            f"spare {node} drained ({reason or 'no reason'}): releasing it, training goes on; "
            f"{len(left)} spare(s) left"
        )

    @property
    def expedited(self) -> bool:
        """The job asked for an expedited requeue, which the cluster allows (`render`)."""
        return self.env.get(environment.EXPEDITED) == "1"

    def floor(self) -> int | None:
        """Slurm's requeue floor (``cred_expire + 1``), when its configuration answers;
        none for an expedited requeue (measured on 26.05: running again in 2 s)."""
        if self.expedited:
            return 0
        try:
            return requeue_floor(self.client.config())
        except SlurmpreError as exc:
            LOG.info(f"cannot read Slurm's configuration: {first_line(exc)}")
            return None

    def in_place(
        self,
        why: str,
        kind: str,
        drained: Iterable[str],
        *,
        early: bool = False,
        started: bool = False,
    ) -> Done | None:
        """Ask the batch script's supervisor to go on without the drained nodes (``early``:
        to start the next step now, beside this one: `overlap`; ``started``: an early
        request came first); None (go on otherwise) when the plan, made again now, says
        the job cannot."""
        restart = self.plan(kind, drained)
        if restart.keep is None:
            return None
        gone = set(drained) | self.spares_lost
        release = tuple(n for n in self.job.allocation if n in gone and n not in restart.keep)
        path = FolderLayout(self.folder).in_place_request(self.job.tag, self.job.attempt)
        request = Request(restart.keep, release, why, self.wall(), restart.spares_in, early)
        try:
            write_request(path, request)
        except (OSError, trust.Untrusted) as exc:
            LOG.info(f"cannot ask for an in-place restart ({exc}); requeuing instead")
            return None
        spare = f", spare {', '.join(restart.spares_in)} in" if restart.spares_in else ""
        when = "when this one ends"
        if early:
            when = "now, beside this one"
        elif started:
            when = "(it did, beside this one) and takes over when this one ends"
        LOG.info(
            f"restarting in place on {', '.join(restart.keep)} without {', '.join(release)}"
            f"{spare} ({why}): the next step starts {when}"
        )
        self.log.add(
            records.InPlaceRequested,
            keep=tuple(restart.keep),
            release=tuple(release),
            why=why,
            requested_at=self.wall(),
            spares_in=restart.spares_in or None,
            early=early or None,
        )
        return Done(Action.REQUEUE, in_place=restart.keep)

    def end_step(self, why: str) -> None:
        """Ask the batch script's supervisor, where one runs, to end the step now and start
        no other: the training has committed its last checkpoint and stops, and the job
        that takes over waits for this one's end."""
        if self.job.batch_host is None:
            return
        path = FolderLayout(self.folder).in_place_request(self.job.tag, self.job.attempt)
        try:
            write_request(path, Request((), (), why, self.wall()))
        except (OSError, trust.Untrusted) as exc:
            LOG.info(f"cannot ask the supervisor to end the step ({exc}); it ends by itself")
            return
        LOG.info(f"asking the supervisor to end the step: {why}")

    def go_on(self, why: str, drained: Iterable[str]) -> Done | None:
        """A successor, or a requeue; None when the requeue failed (try again)."""
        if not self.requeue_allowed:
            LOG.info(
                "the job was submitted without --requeue: not requeuing it "
                "(the checkpoint is taken; resubmit to resume)"
            )
            self.log.add(records.RequeueSkipped, why="job has no --requeue")
            return Done(Action.SKIP, why="job has no --requeue")
        if self.config.restart == "successor":
            done = self.hand_over(why, sorted(drained))
            if done is not None:
                return done
        try:
            with submit_slot(self.env):
                self.client.requeue(self.job.job_id)
        except SlurmpreError as exc:
            LOG.info(f"requeue failed, retrying: {first_line(exc)}")
            return None
        fast = " (expedited: no floor)" if self.expedited else ""
        LOG.info(f"requeued job {self.job.job_id} ({why}){fast}")
        expedited = True if self.expedited else None
        self.log.add(records.Requeued, why=why, requeued_at=self.wall(), expedited=expedited)
        return Done(Action.REQUEUE, requeued=True)
