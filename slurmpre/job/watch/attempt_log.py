"""This attempt's lines in the job's ledger, as the watcher and its restarts write them.

Every record carries the job, the attempt and whether it runs in place; the ledger
failing never stops the watching: it is said, and the job goes on.
"""

from __future__ import annotations

import logging
from typing import Any

from slurmpre.errors import SlurmpreError
from slurmpre.folder import records
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import AttemptId, AttemptRecord, Checkpoint, Saved, Serving, Waiting
from slurmpre.job.start.env import JobEnv

LOG = logging.getLogger(__name__)


class AttemptLog:
    def __init__(self, ledger: Ledger, job: JobEnv) -> None:
        self.ledger, self.job = ledger, job

    def add(self, of: type[records.AttemptRecord], **fields: Any) -> None:
        """Append one record of type ``of`` for this attempt, with ``fields``."""
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
            LOG.info(f"could not write the ledger (watching goes on): {exc}")

    def records(self) -> list[records.Record]:
        """Every record of the folder's ledger (empty, and said, when it cannot be read)."""
        try:
            return self.ledger.records()
        except SlurmpreError as exc:
            LOG.info(f"could not read the ledger: {exc}")
            return []

    def own(self) -> list[AttemptRecord]:
        """This attempt's records (a successor's first attempt is 0 too: the job tells)."""
        this = AttemptId(self.job.restart_count, self.job.in_place)
        return [
            r
            for r in self.records()
            if isinstance(r, AttemptRecord) and r.job == self.job.tag and r.attempt_id == this
        ]

    def notice_save(self, *, pulled: bool) -> Checkpoint | Saved | None:
        """This attempt's newest save after its notice: committed in the folder, or, with
        ``pulled`` (a successor pulls it from this job's nodes, which serve it), sealed on
        the nodes (`slurmpre.tier`)."""
        mine = self.own()
        served = pulled and any(isinstance(r, Serving) for r in mine)
        kinds = (Checkpoint, Saved) if served else (Checkpoint,)
        found = [r for r in mine if isinstance(r, kinds) and r.after_notice]
        return found[-1] if found else None

    def saved_to_stop(self) -> bool:
        """The training committed the checkpoint it stops at (`preemption_requested()` had
        answered True): nothing is left of this attempt's training but its teardown."""
        return any(isinstance(r, Checkpoint) and r.after_notice and r.stopping for r in self.own())

    def waited_for(self, by: set[str], *, next_step: bool) -> bool:
        """A job of ``by`` (a successor, its twin) waits in `resume_path()` for this one; or,
        with ``next_step``, this job's next in-place step, started beside this one."""
        after = AttemptId(self.job.restart_count, self.job.in_place).step_after
        tag = self.job.tag
        return any(
            isinstance(r, Waiting)
            and r.predecessor == tag
            and (r.job in by or (next_step and r.job == tag and r.attempt_id == after))
            for r in self.records()
        )
