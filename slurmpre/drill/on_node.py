"""The node-local tier's part in a drill's preemption (`local_dir`): the notice save on the
node, the pull of it by whatever took over, and its flush into the checkpoint folder, from
the run's ledger (`Preemption.tier_line` says them in words)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from slurmpre.folder import records

if TYPE_CHECKING:
    from slurmpre.drill.timeline import Hit, Observed


def figures(run: Observed, hit: Hit) -> dict[str, float | None]:
    """The node-local tier's part in a preemption: the notice save on the node, its pull
    and its flush (`Preemption`); all None for a run that saves straight to its folder."""
    typed = run.records()
    where = run.attempt_ids.get(hit.attempt, (run.job_id, hit.attempt))
    saved = [r for r in typed if isinstance(r, records.Saved) and r.after_notice
             and (r.job, r.attempt) == where]  # fmt: skip
    if not saved:
        return {}
    step, job = saved[-1].step, saved[-1].job
    # The pull that answered it: by the attempt whose pull of it ended well, its nodes'.
    done = next((r for r in typed if isinstance(r, records.PullDone) and r.ok
                 and r.step == step and r.predecessor == job), None)  # fmt: skip
    pulls = [] if done is None else [
        r for r in typed if isinstance(r, records.Pulled) and r.ok and r.step == step
        and (r.job, r.attempt_id) == (done.job, done.attempt_id)
    ]  # fmt: skip
    flushed = [r.flush_seconds for r in typed if isinstance(r, records.Checkpoint)
               and r.step == step and r.flush_seconds is not None]  # fmt: skip
    return {
        "saved_on_node_s": saved[-1].seconds,
        "pull_s": max(r.seconds for r in pulls) if pulls else None,
        "pull_mb": sum(r.bytes for r in pulls) / 1e6 if pulls else None,
        "flush_s": flushed[0] if flushed else None,
    }
