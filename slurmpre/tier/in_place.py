"""A step restarted in place, with the node-local tier: its notice save reaches the
nodes it keeps before the drained ones go (docs/local-tier.md, 4), so the next step need
not wait for the flush, which a big state cannot finish within the drain's window. With a
hot spare, the next step already runs beside this one (`overlap`): its own nodes, the
spare among them, pull this step's last save instead.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence

from slurmpre.errors import SlurmpreError
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import (
    AttemptId,
    InPlaceRequested,
    Notice,
    PullAsked,
    PullDone,
    Pulled,
    Record,
)
from slurmpre.tier import serving as where

LOG = logging.getLogger(__name__)

# Seconds a pull beside a spare is still waited for once the save is in the folder too: the
# next step reads it from RAM, not back from the shared volume (a successor's grace, too).
COMMITTED_GRACE = 30.0


class InPlacePull:
    """A drained attempt's node 0 that restarts in place: the nodes it keeps pull its
    notice save from every node of the attempt; or, ``beside`` a spare (the next step
    already runs on the kept nodes and the spare), every node of that step pulls this
    one's last save (`settled`). `poll` is asked at every look of the watcher, and never
    waits. Either way its `PullDone` is this step's: once the restart in place is asked,
    its nodes need not flush that save (`kept`)."""

    def __init__(
        self,
        ledger: Ledger,
        job: str,
        at: AttemptId,
        nodes: Sequence[str],
        keep: Sequence[str],
        beside: bool = False,
    ) -> None:
        self.ledger, self.job, self.at, self.beside = ledger, job, at, beside
        self.keep = tuple(keep)
        # Who pulls: node ids of this step, or of the next one (the nodes in ``keep``).
        self.kept = tuple(i for i, node in enumerate(nodes) if node in keep)
        self.spares = sorted(set(keep) - set(nodes))  # not of this step: they hold no copy
        if beside:
            self.kept, self.spares = tuple(range(len(keep))), []
        self.pullers_at = at.step_after if beside else at
        self.step: int | None = None
        self.asked_at = 0.0  # when it asked (the ledger's clock)
        self.first_look: float | None = None  # beside: the first look, when no node served
        self.committed_at: float | None = None  # beside: when the save was seen in the folder
        self.result: bool | None = None

    @property
    def pending(self) -> bool:
        """Asked, and not answered yet: the step must not end before it is."""
        return self.step is not None and self.result is None

    def poll(self, step: int, late: bool) -> bool | None:
        """True once every kept node holds ``step``; False when that failed or came too
        late (``late``: the drained node may go any moment; said, and recorded): wait for
        the flush's commit as without it; None: not yet."""
        if self.result is not None:
            return self.result
        records = self.ledger.records()
        if self.spares:
            return self._done(step, f"the spare(s) {', '.join(self.spares)} hold no copy", records)
        if self.step is None:
            sources = where.all_of(records, self.job, self.at)
            if late:  # asked now, it could not end before the drained node goes
                why = ("not every node of this step serves" if sources is None
                       else "the deadline came before it was asked")  # fmt: skip
                return self._done(step, why, records)
            if sources is None:
                return None
            if self.beside and not self._beside_serves(step, records):
                return self.result
            now = self.ledger.clock()  # its stamp, as the ledger's: earlier pulls are no answer
            self.ledger.append(
                PullAsked(
                    job=self.job,
                    attempt=self.pullers_at.restart,
                    in_place=self.pullers_at.in_place,
                    predecessor=self.job,
                    step=step,
                    sources=tuple(sources),
                    pullers=self.kept,
                    time=now,
                )
            )
            self.step = step
            self.asked_at = now
            return None
        got = {r.node: r for r in records if isinstance(r, Pulled) and r.job == self.job
               and r.attempt_id == self.pullers_at and r.step == self.step
               and r.node in self.kept and (r.time or 0) >= self.asked_at}  # fmt: skip
        failed = [r for r in got.values() if not r.ok]
        if failed:
            return self._done(self.step, f"node {failed[0].node}: {failed[0].why}", records)
        if set(self.kept) <= set(got):
            return self._done(self.step, None, records)
        if late:
            left = sorted(set(self.kept) - set(got))
            return self._done(self.step, f"node(s) {left} had not pulled it in time", records)
        return None

    def settled(self, step: int, keep: Sequence[str], committed: bool, late: bool) -> bool:
        """Beside a spare: whether this step may end, its last save ``step`` held whole by
        every node of the next step (asked here, once), or in the folder (``committed``),
        or at the deadline (``late``) as it is. Not asked when the nodes that go on, planned
        again now (``keep``: another node drained), are not the next step's any more."""
        if self.step is None and self.result is None and tuple(keep) != self.keep:
            return committed or late
        pulled = self.poll(step, late)
        if pulled is not None:
            return pulled or committed or late
        if not committed:
            return False
        now = self.ledger.clock()
        self.committed_at = self.committed_at if self.committed_at is not None else now
        if now - self.committed_at <= COMMITTED_GRACE:
            return False
        self._done(step, f"not pulled {COMMITTED_GRACE:g} s after its flush committed it",
                   self.ledger.records())  # fmt: skip
        return True

    def _beside_serves(self, step: int, records: Sequence[Record]) -> bool:
        """Every node of the next step serves (its tier is up, its puller runs); else, after
        SERVE_WAIT from the first look, the pull is given up (said)."""
        if len(where.serving(records, self.job, self.pullers_at)) >= len(self.kept):
            return True
        now = self.ledger.clock()
        self.first_look = self.first_look if self.first_look is not None else now
        if now - self.first_look > where.SERVE_WAIT:
            self._done(step, "not every node of the next step serves", records)
        return False

    def _done(self, step: int, why: str | None, records: Sequence[Record]) -> bool:
        self.result = why is None
        with contextlib.suppress(SlurmpreError):
            self.ledger.append(PullDone(job=self.job, attempt=self.at.restart,
                                        in_place=self.at.in_place, predecessor=self.job,
                                        step=step, ok=self.result, why=why))  # fmt: skip
        who = "the next step's node(s)" if self.beside else "the node(s) kept"
        if why is None:
            pulled = [r for r in records if isinstance(r, Pulled) and r.job == self.job
                      and r.attempt_id == self.pullers_at and r.step == step]  # fmt: skip
            took = max((r.seconds for r in pulled), default=0.0)
            LOG.info(f"step {step} pulled onto {who} in {took:.1f} s: "
                     "the next step takes it over from there")  # fmt: skip
        else:
            waits = ("this step ends once its flush has committed it" if self.beside
                     else "the next step waits for its flush")  # fmt: skip
            LOG.info(f"{who} could not pull step {step} ({why}): {waits} to the checkpoint "
                     "folder")  # fmt: skip
        return self.result


def kept(records: Sequence[Record], job: str, at: AttemptId, step: int) -> bool:
    """Whether this step restarts in place after a notice (the restart asked: not a run
    that finished its work instead, nor one planned otherwise after another drain) and the
    nodes that go on hold ``step`` (or a newer one) whole, pulled after that notice: its
    wrappers need not wait for its flush, the next step takes it over. (A restart's own
    pulls at its start, which `salvage.gather` asks, are no such thing.)"""
    notices = [r.time or 0 for r in records if isinstance(r, Notice) and r.job == job
               and r.attempt_id == at and r.restart == "in_place"]  # fmt: skip
    asked = any(isinstance(r, InPlaceRequested) and r.job == job and r.attempt_id == at
                and not r.early for r in records)  # fmt: skip
    if not notices or not asked:
        return False
    return any(isinstance(r, PullDone) and r.job == job and r.predecessor == job
               and r.attempt_id == at and r.ok and r.step >= step
               and (r.time or 0) >= min(notices) for r in records)  # fmt: skip
