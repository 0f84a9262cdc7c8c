"""What a drill run was, from what it left behind: a timeline per attempt and a summary.

Pure functions over plain data: the training job's own log (`drill-steps.jsonl`),
the attempt ledger (for slurmpre's notice, checkpoint and requeue), the drill's
preemption events and its samples of the job's Slurm state. Every figure of the
text report is in the JSON one (``as_dict``); docs/drill.md describes each.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from slurmpre import defaults
from slurmpre.job import records
from slurmpre.slurm.parse import HOLDING_NODES

_A = TypeVar("_A", bound=records.AttemptRecord)


@dataclass(frozen=True)
class Sample:
    """The job as Slurm showed it at wall time ``t``."""

    t: float
    state: str
    restarts: int  # the run's attempt: its restarts so far, across its jobs
    nodes: tuple[str, ...]
    job: str = ""  # which of the run's jobs (a successor takes over from its predecessor)


@dataclass(frozen=True)
class Hit:
    """One preemption the drill made: which attempt, which node, and when each phase began."""

    moment: str
    attempt: int
    node: str
    drained_at: float
    removed_at: float | None = None
    returned_at: float | None = None


@dataclass
class Observed:
    """One job run as the drill saw it."""

    mode: str  # "slurmpre", "seeds" or "reference"
    job_id: str
    submitted_at: float
    ended_at: float
    state: str
    log: list[dict[str, Any]]
    samples: list[Sample]
    hits: list[Hit]
    ledger: list[dict[str, Any]] = field(default_factory=list)
    # The run's attempt -> (its job, Slurm's restart count there): the ledger's names.
    attempt_ids: dict[int, tuple[str, int]] = field(default_factory=dict)
    jobs: list[str] = field(default_factory=list)  # the run's jobs, first to last


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


@dataclass(frozen=True)
class Preemption:
    moment: str
    attempt: int
    node: str
    drained_at: float
    notice_seen_s: float | None  # after the drain
    checkpoint_step: (
        int | None
    )  # the checkpoint written for it (slurmpre) / last periodic one (seeds)
    requeue_s: (
        float | None
    )  # after the drain: slurmpre's requeue, or the kill for the seeds' recipe
    resumed_step: int | None
    steps_lost: int | None
    without_training_s: float | None  # last step before -> first step after
    drain_to_first_step_s: float | None


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
    # Per preemption: the time without training (last step before -> first step
    # after), plus the steps lost, which must be trained again, at the uninterrupted
    # run's pace.
    training_lost_per_preemption_s: float | None
    node_seconds: float
    cost_preemptible: float
    cost_on_demand_uninterrupted: float | None
    partial_checkpoint_loaded: bool


@dataclass(frozen=True)
class Prices:
    on_demand_node_hour: float = 10.0
    preemptible_discount: float = defaults.PREEMPTIBLE_DISCOUNT


def _events(log: list[dict[str, Any]], attempt: int, event: str) -> list[dict[str, Any]]:
    return [e for e in log if e.get("attempt") == attempt and e.get("event") == event]


def attempts(run: Observed) -> list[Attempt]:
    seen = sorted({s.restarts for s in run.samples if s.state == "RUNNING"} | _log_attempts(run))
    hit_attempts = {h.attempt for h in run.hits}
    out = []
    for k in seen:
        running = [s for s in run.samples if s.restarts == k and s.state == "RUNNING"]
        steps = _events(run.log, k, "step")
        begin = _events(run.log, k, "begin")
        done = bool(_events(run.log, k, "done"))
        if k in hit_attempts:
            ended = "preempted"
        elif done:
            ended = "completed"
        else:
            ended = run.state.lower() if k == seen[-1] else "ended"
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
                job=run.attempt_ids.get(k, (run.job_id, k))[0],
                job_attempt=run.attempt_ids.get(k, (run.job_id, k))[1],
            )
        )
    return out


def _log_attempts(run: Observed) -> set[int]:
    return {int(e["attempt"]) for e in run.log if "attempt" in e}


def _ledger_for(run: Observed, attempt: int, kind: type[_A]) -> list[_A]:
    """The ledger's records of one kind for an attempt of the run's job (steps in place
    included); records that do not read as records are left out."""
    where = run.attempt_ids.get(attempt, (run.job_id, attempt))
    out = []
    for raw in run.ledger:
        try:
            r = records.Record.from_json(raw)
        except records.ShapeError:
            continue
        if isinstance(r, kind) and (r.job, r.attempt) == where:
            out.append(r)
    return out


def preemptions(run: Observed) -> list[Preemption]:
    rows = attempts(run)
    by_attempt = {a.attempt: a for a in rows}
    out = []
    for hit in run.hits:
        before = by_attempt.get(hit.attempt)
        after = next(
            (a for a in rows if a.attempt > hit.attempt and a.resumed_step is not None), None
        )
        notices = _ledger_for(run, hit.attempt, records.Notice)
        requeues = _ledger_for(run, hit.attempt, records.Requeued)
        handed = _ledger_for(run, hit.attempt, records.Successor)
        if run.mode == "slurmpre":
            saved = [c for c in _ledger_for(run, hit.attempt, records.Checkpoint) if c.after_notice]
            checkpoint_step: int | None = saved[-1].step if saved else None
            requeue_at: float | None = (
                requeues[0].requeued_at if requeues else handed[0].submitted_at if handed else None
            )
        else:
            saves = _events(run.log, hit.attempt, "save-end")
            checkpoint_step = saves[-1]["step"] if saves else None
            requeue_at = hit.removed_at
        last = _progress(rows, hit.attempt)
        lost = None
        if after is not None and after.resumed_step is not None:
            lost = max(last - after.resumed_step, 0)
        # The last step the run trained before this restart: in the preempted attempt, or
        # (drained while starting) before it; else (no step yet at all) its start.
        earlier = [
            a.last_step_at for a in rows if a.attempt <= hit.attempt and a.last_step_at is not None
        ]
        last_at = max(earlier) if earlier else (before.started_at if before else None)
        out.append(
            Preemption(
                moment=hit.moment,
                attempt=hit.attempt,
                node=hit.node,
                drained_at=hit.drained_at,
                notice_seen_s=notices[0].seen_at - hit.drained_at if notices else None,
                checkpoint_step=checkpoint_step,
                requeue_s=None if requeue_at is None else requeue_at - hit.drained_at,
                resumed_step=after.resumed_step if after else None,
                steps_lost=lost,
                without_training_s=(
                    after.first_step_at - last_at
                    if after and after.first_step_at is not None and last_at is not None
                    else None
                ),
                drain_to_first_step_s=(
                    after.first_step_at - hit.drained_at
                    if after and after.first_step_at is not None
                    else None
                ),
            )
        )
    return out


def _progress(rows: list[Attempt], attempt: int) -> int:
    """The furthest step the job had reached by the end of ``attempt`` (0 before any)."""
    reached = [
        step
        for a in rows
        if a.attempt <= attempt
        for step in (a.last_step, a.resumed_step)
        if step is not None
    ]
    return max(reached, default=0)


def node_seconds(samples: list[Sample], ended_at: float) -> float:
    """Seconds each node was held, summed over the run's jobs (a successor starting up
    beside its predecessor holds nodes too): each job's samples in which it held
    nodes, each lasting until that job's next sample."""
    total = 0.0
    for job in dict.fromkeys(s.job for s in samples):
        mine = [s for s in samples if s.job == job]
        for here, nxt in zip(mine, [*mine[1:], None], strict=True):
            until = nxt.t if nxt is not None else ended_at
            if here.state in HOLDING_NODES:
                total += max(until - here.t, 0.0) * len(here.nodes)
    return total


def training_seconds(run: Observed) -> float | None:
    """From the first step to the last, in an uninterrupted run."""
    steps = [e for e in run.log if e.get("event") == "step"]
    return steps[-1]["t"] - steps[0]["t"] if len(steps) > 1 else None


def _step_seconds(run: Observed) -> float | None:
    """Seconds per step of an uninterrupted run."""
    steps = [e for e in run.log if e.get("event") == "step"]
    seconds = training_seconds(run)
    return seconds / (len(steps) - 1) if seconds is not None else None


def summarize(
    run: Observed,
    reference: Observed | None,
    *,
    prices: Prices = Prices(),
    max_nodes: int = 2,
) -> Summary:
    rows = attempts(run)
    pre = preemptions(run)
    done = [e for e in run.log if e.get("event") == "done"]
    lost = [p.steps_lost for p in pre]
    computed = len([e for e in run.log if e.get("event") == "step"])
    wall = run.ended_at - run.submitted_at
    ref_wall = reference.ended_at - reference.submitted_at if reference else None
    ref_training = training_seconds(reference) if reference else None
    drains = [p.drain_to_first_step_s for p in pre if p.drain_to_first_step_s is not None]
    pace = _step_seconds(reference) if reference else None
    lost_time = [
        p.without_training_s + (p.steps_lost or 0) * pace
        for p in pre
        if p.without_training_s is not None and pace is not None
    ]
    held = node_seconds(run.samples, run.ended_at)
    rate = prices.on_demand_node_hour / 3600
    partial = any(
        a.resume_path is not None and not _complete_path(run, a.resume_path) for a in rows
    )
    return Summary(
        mode=run.mode,
        job_id=run.job_id,
        state=run.state,
        attempts=len(rows),
        preemptions=len(pre),
        steps=done[-1]["step"] if done else None,
        steps_lost=None if any(x is None for x in lost) else sum(x or 0 for x in lost),
        steps_computed=computed,
        wall_s=wall,
        uninterrupted_wall_s=ref_wall,
        wall_ratio=wall / ref_wall if ref_wall else None,
        goodput=ref_training / wall if ref_training and wall > 0 else None,
        mean_drain_to_first_step_s=statistics.fmean(drains) if drains else None,
        training_lost_per_preemption_s=(
            statistics.fmean(lost_time) if lost_time and len(lost_time) == len(pre) else None
        ),
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
        "preemptions": [asdict(p) for p in preemptions(run)],
        "summary": asdict(summarize(run, reference, prices=prices)),
    }


# -- text ----------------------------------------------------------------------------
def _s(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _i(value: int | None) -> str:
    return "-" if value is None else str(value)


def timeline_lines(run: Observed) -> list[str]:
    t0 = run.submitted_at
    lines = [f"{run.mode} (job {run.job_id}): {run.state}"]
    lines.append(
        f"  {'attempt':>7} {'nodes':<44} {'start s':>8} {'resumed':>7} {'last step':>9}  ended"
    )
    for a in attempts(run):
        start = None if a.started_at is None else a.started_at - t0
        lines.append(
            f"  {a.attempt:>7} {','.join(a.nodes) or '-':<44} {_s(start):>8} "
            f"{_i(a.resumed_step):>7} {_i(a.last_step):>9}  {a.ended}"
        )
    pre = preemptions(run)
    if pre:
        lines.append(
            f"  {'drain':>7} {'moment':<12} {'node':<22} {'at s':>6} {'notice':>6} {'ckpt':>5} "
            f"{'restart':>7} {'resume':>6} {'lost':>4} {'no-train s':>10} {'drain->step s':>13}"
        )
        for i, p in enumerate(pre, 1):
            lines.append(
                f"  {i:>7} {p.moment:<12} {p.node:<22} {p.drained_at - t0:>6.1f} "
                f"{_s(p.notice_seen_s):>6} {_i(p.checkpoint_step):>5} {_s(p.requeue_s):>7} "
                f"{_i(p.resumed_step):>6} {_i(p.steps_lost):>4} {_s(p.without_training_s):>10} "
                f"{_s(p.drain_to_first_step_s):>13}"
            )
    return lines


# (label, field, digits, which way is better: "lower", "higher", or None for no ratio)
SUMMARY_ROWS: tuple[tuple[str, str, int | None, str | None], ...] = (
    ("final state", "state", None, None),
    ("steps trained", "steps", 0, None),
    ("preemptions", "preemptions", 0, None),
    ("steps lost", "steps_lost", 0, "lower"),
    ("steps computed (with repeats)", "steps_computed", 0, "lower"),
    ("training time lost / preemption (s)", "training_lost_per_preemption_s", 1, "lower"),
    ("mean drain -> first new step (s)", "mean_drain_to_first_step_s", 1, "lower"),
    ("wall time (s)", "wall_s", 1, "lower"),
    ("uninterrupted wall time (s)", "uninterrupted_wall_s", 1, None),
    ("wall / uninterrupted", "wall_ratio", 2, "lower"),
    ("goodput", "goodput", 2, "higher"),
    ("node-seconds held", "node_seconds", 0, "lower"),
    ("cost on preemptible ($)", "cost_preemptible", 4, "lower"),
    ("uninterrupted on on-demand ($)", "cost_on_demand_uninterrupted", 4, None),
)
# What slurmpre must not be behind the seeds' recipe on (the drill fails otherwise).
MUST_LEAD = (
    ("steps lost", "steps_lost"),
    ("training time lost per preemption", "training_lost_per_preemption_s"),
    ("wall time", "wall_s"),
    ("cost", "cost_preemptible"),
)


def _cell(value: object, digits: int | None) -> str:
    if value is None:
        return "-"
    if digits is None or isinstance(value, str):
        return str(value)
    return f"{value:.{digits}f}" if digits else str(round(value))  # type: ignore[call-overload]


def times_better(seeds: float, ours: float, better: str) -> float:
    """How many times better slurmpre's value is than the seeds' recipe's (> 1: better,
    < 1: worse), whichever way the figure counts: ``better`` is "lower" or "higher"."""
    good, bad = (seeds, ours) if better == "lower" else (ours, seeds)
    if bad == 0:
        return 1.0 if good == 0 else math.inf
    return good / bad


def _ratio(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.2f}"


def summary_lines(summaries: list[Summary]) -> list[str]:
    """One column per run; with the seeds' recipe beside slurmpre, a column of how many
    times better slurmpre is, on every row that has a direction."""
    head = f"{'':38}" + "".join(f"{s.mode:>14}" for s in summaries)
    modes = [s.mode for s in summaries]
    pair = modes == ["seeds", "slurmpre"]
    lines = [head + (f"{'x better':>10}" if pair else "")]
    for label, key, digits, better in SUMMARY_ROWS:
        values = [getattr(s, key) for s in summaries]
        row = f"{label:38}" + "".join(f"{_cell(v, digits):>14}" for v in values)
        if pair and better and all(_number(v) for v in values):
            row += f"{_ratio(times_better(values[0], values[1], better)):>10}"
        lines.append(row)
    if pair:
        lines.append(f"{'':38}(x better: how many times better slurmpre is than the seeds' recipe)")
    return lines


def behind(seeds: Summary, ours: Summary) -> list[str]:
    """Where slurmpre is behind the seeds' recipe, on what users pay for."""
    out = []
    for label, key in MUST_LEAD:
        theirs, mine = getattr(seeds, key), getattr(ours, key)
        if mine is None:
            out.append(f"no figure for its {label}")
        elif theirs is not None and mine > theirs:
            out.append(
                f"it is behind the seeds' recipe on {label} ({mine:.4g} against {theirs:.4g})"
            )
    return out


def _number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)
