"""What a drill run cost, from what it left behind: attempts, each preemption's share, a
summary. Pure functions of the recorded timelines (`drill.timeline`); how each figure is
counted is in docs/drill.md ("How each preemption's cost is counted").
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from slurmpre import defaults
from slurmpre.drill import on_node
from slurmpre.drill.timeline import Hit, Observed
from slurmpre.folder import records
from slurmpre.slurm import states

_A = TypeVar("_A", bound=records.AttemptRecord)


@dataclass(frozen=True)
class Attempt:
    attempt: int
    nodes: tuple[str, ...]
    started_at: float | None  # first seen RUNNING
    first_step_at: float | None
    resumed_step: int | None
    resume_path: str | None
    last_step: int | None
    last_step_at: float | None
    ended: str  # "preempted", "completed", or the job's final state
    job: str = ""  # the job it ran in (successors are jobs of their own)
    job_attempt: int = 0  # Slurm's restart count in that job: its log's attempt
    done_at: float | None = None  # when it ended the training (the run's last step was its)
    begun_at: float | None = None  # when its training had started up (resumed, ready to step)

    @property
    def back_at(self) -> float | None:
        """When this attempt moved the run on: its first step, or (resumed at the last
        step, with nothing left to train) the end of the training."""
        return self.first_step_at if self.first_step_at is not None else self.done_at


@dataclass(frozen=True)
class Preemption:
    moment: str
    attempt: int
    node: str
    drained_at: float
    notice_seen_s: float | None  # after the drain; None for the seeds' recipe (it sees none)
    checkpoint_step: int | None  # slurmpre's checkpoint for it / the seeds' last periodic one
    # After the drain: slurmpre's hand-over or requeue, or the kill that requeues the seeds'
    # job; None when there was no restart (the attempt rode the preemption out).
    requeue_s: float | None
    resumed_step: int | None  # the step the run trained on from after it
    # The figures below are None only when the run ended before it trained again.
    steps_lost: int | None
    without_training_s: float | None  # its share of the run's time without training
    training_lost_s: float | None  # that share, plus its steps lost at the uninterrupted pace
    drain_to_first_step_s: float | None
    capacity_wait_s: float | None  # of drain -> first step: too few preemptible nodes in service
    shared_with: tuple[int, ...] = ()  # other preemptions (1-based) that ended in the same restart
    # The node-local tier's part (`on_node.figures`, docs/drill.md); None: not done, or no tier.
    saved_on_node_s: float | None = None
    pull_s: float | None = None
    pull_mb: float | None = None
    flush_s: float | None = None

    def tier_line(self) -> str | None:
        """The node-local tier's part in words (None: no tier)."""
        if self.saved_on_node_s is None:
            return None
        pull = (
            "no pull"
            if self.pull_s is None
            else f"pulled {self.pull_mb or 0:,.0f} MB in {self.pull_s:.1f} s"
        )
        flush = (
            "not flushed"
            if self.flush_s is None
            else f"flushed into the folder in {self.flush_s:.1f} s"
        )
        return f"saved on the node in {self.saved_on_node_s:.1f} s, {pull}, {flush}"


@dataclass(frozen=True)
class Summary:
    mode: str
    job_id: str
    state: str
    attempts: int
    preemptions: int
    steps: int | None  # the final step
    steps_lost: int | None
    steps_computed: int  # every step trained, counting the ones trained twice
    wall_s: float
    uninterrupted_wall_s: float | None
    wall_ratio: float | None  # wall / uninterrupted wall
    goodput: float | None  # uninterrupted training seconds / wall
    mean_drain_to_first_step_s: float | None
    mean_capacity_wait_s: float | None  # the fleet's part of drain -> first new step
    mean_own_latency_s: float | None  # the rest: the run's own
    # The run's time without training and its steps lost (at the uninterrupted pace),
    # over its preemptions.
    training_lost_per_preemption_s: float | None
    node_seconds: float
    cost_preemptible: float
    cost_on_demand_uninterrupted: float | None
    partial_checkpoint_loaded: bool


@dataclass(frozen=True)
class Prices:
    on_demand_node_hour: float = defaults.DRILL_NODE_HOUR
    preemptible_discount: float = defaults.PREEMPTIBLE_DISCOUNT


def _events(log: list[dict[str, Any]], attempt: int, event: str) -> list[dict[str, Any]]:
    return [e for e in log if e.get("attempt") == attempt and e.get("event") == event]


def attempts(run: Observed) -> list[Attempt]:
    seen = sorted(
        {s.restarts for s in run.samples if s.state == states.RUNNING}
        | {int(e["attempt"]) for e in run.log if "attempt" in e}
    )
    hit_attempts = {h.attempt for h in run.hits}
    out = []
    for k in seen:
        running = [s for s in run.samples if s.restarts == k and s.state == states.RUNNING]
        steps = _events(run.log, k, "step")
        begin = _events(run.log, k, "begin")
        done = _events(run.log, k, "done")
        if k in hit_attempts:
            ended = "preempted"
        elif done:
            ended = "completed"
        else:
            ended = run.state.lower() if k == seen[-1] else "ended"
        job, job_attempt = run.attempt_ids.get(k, (run.job_id, k))
        out.append(
            Attempt(
                attempt=k,
                nodes=running[0].nodes if running else (),
                started_at=running[0].t if running else None,
                first_step_at=steps[0]["t"] if steps else None,
                resumed_step=begin[0]["resumed_step"] if begin else None,
                resume_path=begin[0].get("resume_path") if begin else None,
                last_step=steps[-1]["step"] if steps else None,
                last_step_at=steps[-1]["t"] if steps else None,
                ended=ended,
                job=job,
                job_attempt=job_attempt,
                done_at=done[0]["t"] if done else None,
                begun_at=begin[0]["t"] if begin else None,
            )
        )
    return out


def _ledger_for(run: Observed, attempt: int, kind: type[_A]) -> list[_A]:
    """The ledger's records of one kind for an attempt of the run's job (steps in place
    included); records that do not read as records are left out."""
    where = run.attempt_ids.get(attempt, (run.job_id, attempt))
    return [r for r in run.records() if isinstance(r, kind) and (r.job, r.attempt) == where]


@dataclass(frozen=True)
class _Restart:
    """The restart that ended a group of preemptions: the run's time without training
    (``start`` to ``back``) and the steps it trained again."""

    start: float
    back: float
    resumed: int
    lost: int


def _restart(rows: list[Attempt], hit: Hit) -> Attempt | None:
    """The first attempt after the preempted one that moved the run on."""
    return next((a for a in rows if a.attempt > hit.attempt and a.back_at is not None), None)


def _gap(rows: list[Attempt], first: Hit, after: Attempt) -> _Restart:
    assert after.back_at is not None  # noqa: S101 - _restart chose it for having one
    before = [a for a in rows if a.attempt < after.attempt]
    steps = [a.last_step_at for a in before if a.last_step_at is not None]
    begun = [a.begun_at for a in before if a.begun_at is not None]
    if steps:
        start = max(steps)
    elif begun:  # nothing trained before it: from when the first attempt could have
        start = min(begun)
    else:
        hit_row = next((a for a in rows if a.attempt == first.attempt), None)
        start = hit_row.started_at if hit_row and hit_row.started_at else first.drained_at
    # What is trained again: the steps the last attempt that trained took beyond the step
    # this one resumed from (not the run's furthest step: an earlier restart may have
    # lost those already, and they count once).
    trainer = next((a for a in reversed(before) if a.last_step is not None), None)
    reached = trainer.last_step if trainer is not None and trainer.last_step is not None else 0
    resumed = after.resumed_step if after.resumed_step is not None else reached
    return _Restart(start, after.back_at, resumed, max(reached - resumed, 0))


def _share(gap: _Restart, drains: list[float], i: int) -> float:
    """Preemption ``i``'s part of a restart's time without training: from its drain (the
    first one's: from the gap's start) to the next drain of the group (the last one's: to
    the gap's end). The parts add up to the whole gap."""
    lo = gap.start if i == 0 else max(gap.start, min(drains[i], gap.back))
    hi = gap.back if i == len(drains) - 1 else max(gap.start, min(drains[i + 1], gap.back))
    return max(hi - lo, 0.0)


def preemptions(run: Observed, pace: float | None = None) -> list[Preemption]:
    """Each preemption with its share of what the run lost. ``pace``: seconds a step of
    the uninterrupted run takes (the steps lost are charged at it); default the run's own."""
    rows = attempts(run)
    hits = sorted(run.hits, key=lambda h: h.drained_at)
    pace = pace if pace is not None else _own_pace(run)
    afters = [_restart(rows, hit) for hit in hits]
    groups: dict[int, list[int]] = {}  # a restart's attempt -> the hits it ended
    for i, after in enumerate(afters):
        if after is not None:
            groups.setdefault(after.attempt, []).append(i)
    out = []
    for i, (hit, after) in enumerate(zip(hits, afters, strict=True)):
        requeue_at = _restart_moment(run, hit)
        lost: int | None
        if after is None:
            # No attempt after it trained. If the training was done all the same (the
            # drained attempt finished it, or an earlier one had), the preemption cost it
            # nothing; else the run ended before it trained again, and its cost is unknown.
            done = any(e.get("event") == "done" for e in run.log)
            lost, share, drain_step, wait = (0, 0.0, 0.0, 0.0) if done else (None,) * 4
            shared: tuple[int, ...] = ()
            resumed = None
        else:
            group = groups[after.attempt]
            first = hits[group[0]]
            gap = _gap(rows, first, after)
            drains = [hits[j].drained_at for j in group]
            share = _share(gap, drains, group.index(i))
            lost = gap.lost if group[0] == i else 0  # trained by the first one's attempt
            drain_step = max(gap.back - hit.drained_at, 0.0)
            wait = run.out_of_service(hit.drained_at, gap.back)
            shared = tuple(j + 1 for j in group if j != i)
            resumed = gap.resumed
        notices = _ledger_for(run, hit.attempt, records.Notice)
        tier = on_node.figures(run, hit)
        out.append(
            Preemption(
                moment=hit.moment,
                attempt=hit.attempt,
                node=hit.node,
                drained_at=hit.drained_at,
                notice_seen_s=notices[0].seen_at - hit.drained_at if notices else None,
                checkpoint_step=_checkpoint_step(run, hit),
                requeue_s=None if requeue_at is None else requeue_at - hit.drained_at,
                resumed_step=resumed,
                steps_lost=lost,
                without_training_s=share,
                training_lost_s=_time_lost(share, lost, pace),
                drain_to_first_step_s=drain_step,
                capacity_wait_s=wait,
                shared_with=shared,
                **tier,
            )
        )
    return out


def _time_lost(share: float | None, lost: int | None, pace: float | None) -> float | None:
    """Time without training, plus the steps lost at ``pace`` (to be trained again)."""
    if share is None or lost is None:
        return None
    if lost == 0:
        return share
    return None if pace is None else share + lost * pace


def _restart_moment(run: Observed, hit: Hit) -> float | None:
    """slurmpre's hand-over or requeue for it; for the seeds' recipe, the kill at removal."""
    if run.mode == "seeds":
        return hit.removed_at
    requeues = _ledger_for(run, hit.attempt, records.Requeued)
    handed = _ledger_for(run, hit.attempt, records.Successor)
    moments = [r.requeued_at for r in requeues] + [s.submitted_at for s in handed]
    return min(moments) if moments else None


def _checkpoint_step(run: Observed, hit: Hit) -> int | None:
    if run.mode != "seeds":  # slurmpre's: committed in the folder, or saved on the node
        return records.notice_step(_ledger_for(run, hit.attempt, records.AttemptRecord))
    saves = _events(run.log, hit.attempt, "save-end")
    return saves[-1]["step"] if saves else None


def training_seconds(run: Observed) -> float | None:
    """From the first step to the last, in an uninterrupted run."""
    steps = [e for e in run.log if e.get("event") == "step"]
    return steps[-1]["t"] - steps[0]["t"] if len(steps) > 1 else None


def step_seconds(reference: Observed | None) -> float | None:
    """Seconds per step of an uninterrupted run (None without one)."""
    if reference is None:
        return None
    steps = [e for e in reference.log if e.get("event") == "step"]
    seconds = training_seconds(reference)
    return seconds / (len(steps) - 1) if seconds is not None else None


def _own_pace(run: Observed) -> float | None:
    """The run's median seconds between two steps of one attempt."""
    gaps = [
        b["t"] - a["t"]
        for a, b in zip(run.log, run.log[1:], strict=False)
        if a.get("event") == b.get("event") == "step" and a.get("attempt") == b.get("attempt")
    ]
    return statistics.median(gaps) if gaps else None


def _mean(values: list[float | None]) -> float | None:
    """The mean of figures that all exist (None when one is missing, or there are none)."""
    if not values or any(v is None for v in values):
        return None
    return statistics.fmean(v for v in values if v is not None)


def summarize(
    run: Observed,
    reference: Observed | None,
    *,
    prices: Prices = Prices(),
    max_nodes: int = 2,
) -> Summary:
    rows = attempts(run)
    pre = preemptions(run, step_seconds(reference))
    done = [e for e in run.log if e.get("event") == "done"]
    lost = [p.steps_lost for p in pre]
    wall = run.ended_at - run.submitted_at
    ref_wall = reference.ended_at - reference.submitted_at if reference else None
    ref_training = training_seconds(reference) if reference else None
    held = run.node_seconds()
    rate = prices.on_demand_node_hour / 3600
    partial = any(
        a.resume_path is not None and not _complete_path(run, a.resume_path) for a in rows
    )
    drain_step = _mean([p.drain_to_first_step_s for p in pre])
    wait = _mean([p.capacity_wait_s for p in pre])
    return Summary(
        mode=run.mode,
        job_id=run.job_id,
        state=run.state,
        attempts=len(rows),
        preemptions=len(pre),
        steps=done[-1]["step"] if done else None,
        steps_lost=None if any(x is None for x in lost) else sum(x or 0 for x in lost),
        steps_computed=len([e for e in run.log if e.get("event") == "step"]),
        wall_s=wall,
        uninterrupted_wall_s=ref_wall,
        wall_ratio=wall / ref_wall if ref_wall else None,
        goodput=ref_training / wall if ref_training and wall > 0 else None,
        mean_drain_to_first_step_s=drain_step,
        mean_capacity_wait_s=wait,
        mean_own_latency_s=None if drain_step is None or wait is None else drain_step - wait,
        training_lost_per_preemption_s=_mean([p.training_lost_s for p in pre]),
        node_seconds=held,
        cost_preemptible=held * rate * (1 - prices.preemptible_discount),
        cost_on_demand_uninterrupted=ref_wall * max_nodes * rate if ref_wall else None,
        partial_checkpoint_loaded=partial,
    )


def _complete_path(run: Observed, path: str) -> bool:
    """Whether the checkpoint an attempt resumed from had been completely written
    when it was loaded: a save-end for its step came before that attempt began."""
    name = path.rstrip("/").rpartition("/")[2]
    if not name.startswith("step-"):
        return True
    step = int(name.removeprefix("step-"))
    return any(e.get("event") == "save-end" and e.get("step") == step for e in run.log)


def as_dict(run: Observed, reference: Observed | None, prices: Prices = Prices()) -> dict[str, Any]:
    return {
        "job_id": run.job_id,
        "mode": run.mode,
        "attempts": [asdict(a) for a in attempts(run)],
        "preemptions": [asdict(p) for p in preemptions(run, step_seconds(reference))],
        "summary": asdict(summarize(run, reference, prices=prices)),
    }
