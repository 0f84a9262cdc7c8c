"""Where each checkpoint of a run is, from the ledger (`slurmpre status`): saved on the
nodes (`local_dir`), pulled by the job that took over, flushing into the checkpoint
folder, or there (durable). Only runs that save on the nodes have such rows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from slurmpre.folder.records import (
    Adopted,
    AttemptId,
    Checkpoint,
    PullAsked,
    PullDone,
    Record,
    Replicated,
    Saved,
)

SHOWN = 5  # the newest checkpoints a status shows


@dataclass(frozen=True)
class Tiers:
    step: int
    job: str
    saved_s: float | None  # how long the training stopped for the save on the nodes
    pulled_by: str | None  # who pulled it from the nodes: "job N", or the next step's nodes
    durable: bool  # committed in the checkpoint folder
    flush_s: float | None  # the background copy and commit
    kept: int = 0  # nodes that hold their neighbour's part of it too (`tier.replica`)
    taken_by: str | None = None  # the attempt that took it over from its nodes' folders
    # A pull of it that failed: by whom (a successor job, "in place": the nodes the drained
    # step kept, "beside": the next step started beside it on a spare, "restart": a
    # restart gathering it after a node was lost), and why.
    pull_failed: tuple[str, str] | None = None

    def line(self, running: bool) -> str:
        where = [f"saved on job {self.job}'s nodes ({self.saved_s:.1f} s)"]
        if self.kept:
            where.append(f"each part also on the next node ({self.kept} nodes)")
        if self.pulled_by:
            where.append(f"pulled by {self.pulled_by}")
        elif self.pull_failed:
            by, why = self.pull_failed
            if by == "in place":
                where.append(f"the nodes kept could not pull it ({why}): the next step "
                             "waited for its flush")  # fmt: skip
            else:
                who = {"restart": "the restart", "beside": "the next step's nodes"}.get(by)
                who = who or f"job {by}"
                where.append(f"{who} could not pull it ({why}): it resumed from the folder")
        if self.taken_by:
            where.append(f"taken over on the nodes by attempt {self.taken_by}")
        if self.durable:
            flush = f" (flushed in {self.flush_s:.0f} s)" if self.flush_s is not None else ""
            where.append(f"in the folder{flush}")
        else:
            where.append("flushing" if running else "never in the folder (skipped or cut)")
        return f"step {self.step}: " + ", ".join(where)


def of_run(records: Sequence[Record], jobs: Sequence[str]) -> list[Tiers]:
    """The newest checkpoints the run's jobs saved on their nodes, with their tiers."""
    mine = set(jobs)
    saves: dict[int, Saved] = {}
    for r in records:
        if isinstance(r, Saved) and r.job in mine:
            saves[r.step] = r
    if not saves:
        return []
    durable = {r.step: r for r in records if isinstance(r, Checkpoint) and r.job in mine}
    pulled: dict[int, str] = {}
    failed: dict[int, tuple[str, str]] = {}
    beside = {(r.job, r.attempt_id, r.step) for r in records
              if isinstance(r, PullAsked) and r.job in mine and r.predecessor == r.job}  # fmt: skip
    for r in records:
        if not isinstance(r, PullDone) or r.predecessor not in mine or r.step not in saves:
            continue
        by = _puller(r, saves[r.step], beside)
        if r.ok and by not in ("in place", "restart"):  # those: taken over, shown below
            pulled[r.step] = f"job {by}" if by != "beside" else "the next step's nodes"
        elif not r.ok:
            failed[r.step] = (by, r.why or "no reason given")
    kept: dict[int, set[int]] = {}
    for r in records:
        if isinstance(r, Replicated) and r.job in mine:
            kept.setdefault(r.step, set()).add(r.node)
    taken = {r.step: f"{r.job}.{r.attempt_id}" for r in records
             if isinstance(r, Adopted) and r.job in mine}  # fmt: skip
    out = []
    for step in sorted(saves)[-SHOWN:]:
        saved = saves[step]
        flushed = durable.get(step)
        out.append(
            Tiers(
                step=step,
                job=saved.job,
                saved_s=saved.seconds,
                pulled_by=pulled.get(step),
                durable=flushed is not None,
                flush_s=flushed.flush_seconds if flushed else None,
                kept=len(kept.get(step, ())),
                taken_by=taken.get(step),
                pull_failed=failed.get(step),
            )
        )
    return out


def _puller(done: PullDone, saved: Saved, beside: set[tuple[str, AttemptId, int]]) -> str:
    """Who pulled the save ``saved``: a successor job (its id), or its own job's nodes: the
    drained step's kept ones ("in place"), the next step started beside it on a spare
    ("beside": the drained step's node 0 asked them, under that step, and recorded the
    outcome under its own), a restart gathering it after a node was lost ("restart")."""
    at = saved.attempt_id
    if done.job != saved.job:
        return done.job
    if done.attempt_id != at:
        return "restart"
    return "beside" if (done.job, at.step_after, done.step) in beside else "in place"
