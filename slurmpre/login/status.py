"""A job's story from its attempt ledger and Slurm: one row per attempt (how it ended, what it
resumed from, the steps it lost: `slurmpre.login.lost`), and what the run cost
(docs/login.md, ``slurmpre status``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from slurmpre import defaults
from slurmpre.folder.layout import attempt_key
from slurmpre.folder.records import (
    AttemptId,
    AttemptRecord,
    Checkpoint,
    Claimed,
    End,
    GaveUp,
    InPlace,
    Notice,
    Placed,
    Record,
    Requeued,
    SpareReleased,
    Start,
    Stopping,
    Successor,
    Waiting,
    notice_step,
)
from slurmpre.login import lost, tiers
from slurmpre.login.resizes import Resize, resizes
from slurmpre.login.tiers import Tiers
from slurmpre.placement.facts import kinds_by_job
from slurmpre.placement.policy import PREEMPTIBLE, STANDARD
from slurmpre.slurm import states
from slurmpre.slurm.parse import JobInfo, tres
from slurmpre.slurm.states import UNKNOWN_TO_SLURM


@dataclass(frozen=True)
class AttemptRow:
    """One attempt, as ``slurmpre status --json`` gives it (each field: docs/login.md)."""

    attempt: int
    nodes: tuple[str, ...]
    started_at: float | None
    ended_at: float | None
    ended: str
    resumed_from: str | None
    resume_step: int | None
    notice: str | None  # "drain of NODE (reason)" / "time-limit"
    step_at_notice: int | None  # the newest complete checkpoint when the notice came
    checkpoint_step: int | None  # the checkpoint taken on the notice
    steps_lost: int | None
    gap_s: float | None  # this attempt's end -> the next one's start
    in_place: int = 0  # restarts inside the allocation before this row (attempt 2.1: 1)
    job: str = ""  # the Slurm job of this attempt (a successor's, after a hand-over)
    up_at: float | None = None  # a successor up before its start, waiting (make before break)
    waited_for: str | None = None  # for this job, its predecessor
    stop_asked_at: float | None = None  # trained on after its notice save until told to stop
    stop_why: str | None = None
    gave_up: str | None = None  # why the run stopped restarting here
    code: str | None = None  # as its submit found it (`slurmpre.login.code`)
    on: str = PREEMPTIBLE  # where it trained, and where it sent the next job (`placement`)
    placed: str | None = None
    spares: tuple[str, ...] = ()  # held, not training (`spare_nodes`)
    spares_in: tuple[str, ...] = ()  # those that took a drained node's place at its end
    spares_lost: tuple[tuple[float | None, tuple[str, ...]], ...] = ()  # (when, which) lost
    unseen: lost.Unseen | None = None  # no count of steps lost: at most these (`lost`)

    @property
    def label(self) -> str:
        return attempt_key(self.attempt, self.in_place)

    @property
    def lost(self) -> str:
        """Steps lost: counted, estimated (``~N``), bounded (``<=N``), or unknown (``-``)."""
        if self.steps_lost is not None:
            return str(self.steps_lost)
        return "-" if self.unseen is None else self.unseen.shown


@dataclass(frozen=True)
class Prices:
    price: float = defaults.ON_DEMAND_PRICE  # per GPU-hour (node-hour for a job without GPUs)
    discount: float = defaults.PREEMPTIBLE_DISCOUNT


@dataclass
class JobStatus:
    job: str
    name: str
    state: str  # Slurm's, or "UNKNOWN TO SLURM" for a job it has forgotten
    restarts: int
    checkpoint_dir: str
    attempts: list[AttemptRow] = field(default_factory=list)
    node_hours: float = 0.0
    gpu_hours: float = 0.0
    cost_preemptible: float = 0.0
    cost_on_demand: float = 0.0
    # The jobs of the run, first to last: one, or more after hand-overs to successors.
    chain: list[str] = field(default_factory=list)
    # What the run cost, each node-hour at the price of its kind, and the hours on
    # standard nodes among node_hours (a deadline or a fallback moved it there).
    cost: float = 0.0
    standard_node_hours: float = 0.0
    resizes: list[Resize] = field(default_factory=list)
    # With `local_dir`: the newest checkpoints, where each is (`slurmpre.login.tiers`).
    tiers: list[Tiers] = field(default_factory=list)
    running: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def chain(records: list[Record], job: str) -> list[str]:
    """``job`` and the successors that took over from it, in order (each job hands over
    at most once; a loop in a corrupt ledger ends the chain)."""
    after: dict[str, str] = {}
    started = {r.job for r in records if isinstance(r, Start | Claimed)}
    for r in records:
        if isinstance(r, Successor) and (r.job not in after or r.successor in started):
            after[r.job] = r.successor  # of a successor and its twin, the one that ran
    out = [job]
    while out[-1] in after and after[out[-1]] not in out:
        out.append(after[out[-1]])
    return out


def _ended(recs: list[AttemptRecord], has_next: bool, slurm: JobInfo | None) -> str:
    end = next((r for r in recs if isinstance(r, End)), None)
    requeued = any(isinstance(r, Requeued) for r in recs)
    handed = next((r for r in recs if isinstance(r, Successor)), None)
    if any(isinstance(r, GaveUp) for r in recs):
        return "gave up"
    notices = [r for r in recs if isinstance(r, Notice)]
    kind = notices[0].kind if notices else None
    if handed is not None:
        if kind == "grow":  # a resize: from how many nodes to how many
            return f"grow {notices[0].nodes} -> {notices[0].grow_to} nodes: job {handed.successor}"
        return f"notice -> job {handed.successor}"
    if requeued:
        how = "requeue (expedited)" if any(
            isinstance(r, Requeued) and r.expedited for r in recs
        ) else "requeue"  # fmt: skip
        return f"time limit -> {how}" if kind == "time-limit" else f"notice -> {how}"
    if any(isinstance(r, InPlace) for r in recs):
        return "notice -> in place"
    if end is None:
        if has_next:
            return "node failure"  # killed with its node; Slurm requeued it
        if slurm is not None and slurm.holds_nodes:
            return "running"
        return "killed" if slurm is None else slurm.state.lower()
    if end.exit_code == 0:
        return "completed"
    if has_next and not notices:  # Slurm started it again: its node failed, most often
        return f"failed (exit {end.exit_code}) -> requeue"
    if slurm is not None and slurm.state == states.TIMEOUT and not has_next:
        return "time limit"
    if slurm is not None and slurm.state == states.CANCELLED and not has_next:
        return f"cancelled (exit {end.exit_code})"
    return f"failed (exit {end.exit_code})"


def _row(
    k: tuple[str, AttemptId],
    recs: list[AttemptRecord],
    start: Start | None,
    nxt: Start | None,
    slurm: JobInfo | None,
    now: float,
    on: str = PREEMPTIBLE,
    run: list[list[lost.Save]] | None = None,
) -> tuple[AttemptRow, float]:
    """One attempt's row, from its records and the next attempt's start; and the node
    seconds it held (a successor holds its nodes from its start-up on, while it waits:
    make before break)."""
    end = next((r for r in recs if isinstance(r, End)), None)
    notice = next((r for r in recs if isinstance(r, Notice)), None)
    committed = [r for r in recs if isinstance(r, Checkpoint)]
    started = start.time if start else None
    ended_at = end.time if end else (nxt.time if nxt else None)
    running = slurm is not None and slurm.holds_nodes
    held_until = now if ended_at is None and running else ended_at
    waiting = [r for r in recs if isinstance(r, Waiting)]
    waited = [r.waiting_at for r in waiting]
    held_from = min([started, *waited]) if started is not None else None
    stopping = next((r for r in recs if isinstance(r, Stopping)), None)
    held = 0.0
    if held_from is not None and held_until is not None and start is not None:
        held = max(held_until - held_from, 0.0) * (len(start.nodes) + len(start.spares or ()))
    checkpoint_step = notice_step(recs)
    newest = committed[-1].step if committed else (start.step if start else None)
    steps_lost = lost.counted(checkpoint_step, newest, nxt)
    row = AttemptRow(
        attempt=k[1].restart,
        in_place=k[1].in_place,
        job=k[0],
        nodes=start.nodes if start else (),
        started_at=started,
        ended_at=ended_at,
        ended=_ended(recs, nxt is not None, slurm if nxt is None else None),
        resumed_from=start.resume_from if start else None,
        resume_step=start.step if start else None,
        notice=notice.describe() if notice else None,
        step_at_notice=notice.step_at_notice if notice else None,
        checkpoint_step=checkpoint_step,
        steps_lost=steps_lost,
        gap_s=(nxt.time - ended_at if nxt and nxt.time is not None and ended_at else None),
        up_at=min(waited) if waited else None,
        waited_for=waiting[0].predecessor if waiting else None,
        stop_asked_at=stopping.asked_at if stopping else None,
        stop_why=stopping.why if stopping else None,
        gave_up=next((r.why for r in recs if isinstance(r, GaveUp)), None),
        code=start.code if start else None,
        on=on,
        placed=next((f"{r.where}: {r.why}" for r in recs if isinstance(r, Placed)), None),
        spares=(start.spares or ()) if start else (),
        spares_in=next((r.spares_in or () for r in recs if isinstance(r, InPlace)), ()),
        spares_lost=tuple(
            (r.released_at, r.released) for r in recs if isinstance(r, SpareReleased) and r.released
        ),
        unseen=lost.unseen(recs, start, nxt, run or []) if steps_lost is None else None,
    )
    return row, held


def job_status(
    job: str,
    name: str,
    checkpoint_dir: str,
    records: list[Record],
    slurm: JobInfo | None,
    *,
    gpus_per_node: int = 0,
    prices: Prices = Prices(),
    now: float,
) -> JobStatus:
    """Rows from the ledger's records of the run that ``job`` began: its attempts, then
    those of each successor that took over. ``slurm`` is Slurm's view of the run's last
    job (None when Slurm forgot it)."""
    jobs = chain(records, job)
    order = {j: i for i, j in enumerate(jobs)}
    mine = [r for r in records if isinstance(r, AttemptRecord) and r.job in order]
    # An attempt is its job in the chain, Slurm's restart count and, after in-place
    # restarts, their number.
    attempts = sorted(
        {(r.job, r.attempt_id) for r in mine},
        key=lambda a: (order[a[0]], a[1].restart, a[1].in_place),
    )
    starts = {(r.job, r.attempt_id): r for r in mine if isinstance(r, Start)}
    rows: list[AttemptRow] = []
    node_seconds = standard_seconds = 0.0
    kind = kinds_by_job(mine)
    of = {k: [r for r in mine if (r.job, r.attempt_id) == k] for k in attempts}
    saves = {k: lost.saves(recs) for k, recs in of.items()}
    for i, k in enumerate(attempts):
        nxt = starts.get(attempts[i + 1]) if i + 1 < len(attempts) else None
        run = [s for other, s in saves.items() if other != k]
        on = kind.get(k[0], PREEMPTIBLE)
        row, held = _row(k, of[k], starts.get(k), nxt, slurm, now, on, run)
        rows.append(row)
        node_seconds += held
        standard_seconds += held if row.on == STANDARD else 0.0
    restarts = max(len({(a.job, a.attempt) for a in rows}) - 1, 0)
    node_hours = node_seconds / 3600
    gpu_hours = node_hours * gpus_per_node
    billed = gpu_hours if gpus_per_node else node_hours
    standard = standard_seconds / 3600
    on_standard = standard * gpus_per_node if gpus_per_node else standard
    if slurm is not None and len(jobs) == 1:
        restarts = max(restarts, slurm.restarts)  # Slurm's count holds attempts unrecorded
    return JobStatus(
        job=job,
        name=name,
        chain=jobs,
        state=slurm.state if slurm is not None else UNKNOWN_TO_SLURM,
        restarts=restarts,
        checkpoint_dir=checkpoint_dir,
        attempts=rows,
        node_hours=node_hours,
        gpu_hours=gpu_hours,
        cost_preemptible=billed * prices.price * (1 - prices.discount),
        cost_on_demand=billed * prices.price,
        cost=(billed - on_standard) * prices.price * (1 - prices.discount)
        + on_standard * prices.price,
        standard_node_hours=standard,
        resizes=resizes(rows, prices, gpus_per_node),
        tiers=tiers.of_run(records, jobs),
        running=slurm is not None and not slurm.finished,
    )


def gpus_of(info: JobInfo | None) -> int:
    """GPUs per node from the job's TRES (``gres/gpu=16`` over ``node=2``)."""
    if info is None:
        return 0
    raw = info.raw.get("TRES")
    gpus, nodes = tres(raw, "gres/gpu"), tres(raw, "node") or 1
    return gpus // nodes


def _clock(t: float | None, t0: float | None) -> str:
    return "-" if t is None or t0 is None else f"+{t - t0:.0f}s"


def _seconds(end: float | None, start: float | None) -> str:
    # round() to an int: a wait of -0.3 s (two clocks a moment apart) is "0 s", not "-0 s"
    return "-" if end is None or start is None else f"{round(end - start)} s"


def lines(st: JobStatus) -> list[str]:
    jobs = f"jobs {' -> '.join(st.chain)}" if len(st.chain) > 1 else f"job {st.job}"
    out = [
        f"{jobs} ({st.name}): {st.state}, {st.restarts} restart(s); "
        f"checkpoints in {st.checkpoint_dir}"
    ]
    t0 = next((a.started_at for a in st.attempts if a.started_at is not None), None)
    out.append(
        f"  {'#':>4} {'nodes':<40} {'start':>7} {'end':>7}  {'ended':<22} {'resumed':>7} "
        f"{'notice ckpt':>11} {'lost':>5} {'gap s':>6}"
    )
    shown_code: str | None = None
    for a in st.attempts:
        label = f"{a.job}.{a.label}" if len(st.chain) > 1 else a.label
        out.append(
            f"  {label:>4} {','.join(a.nodes) or '-':<40} {_clock(a.started_at, t0):>7} "
            f"{_clock(a.ended_at, t0):>7}  {a.ended:<22} "
            f"{'-' if a.resume_step is None else a.resume_step:>7} "
            f"{'-' if a.checkpoint_step is None else a.checkpoint_step:>11} "
            f"{a.lost:>5} "
            f"{'-' if a.gap_s is None else f'{a.gap_s:.0f}':>6}"
        )
        if a.spares:
            out.append(f"     spares: {','.join(a.spares)} (held, not training)")
        if a.code is not None and a.code != shown_code:
            changed = "" if shown_code is None else " (not the code of the attempt above)"
            out.append(f"     code: {a.code}{changed}")
            shown_code = a.code
        if a.up_at is not None:
            out.append(
                f"     up at {_clock(a.up_at, t0)} beside job {a.waited_for}, whose last "
                f"checkpoint it waited for {_seconds(a.started_at, a.up_at)} (make before break)"
            )
        if a.notice:
            out.append(f"     notice: {a.notice}")
        if a.unseen is not None:
            u = a.unseen
            out.append(f"     {u.line(_clock(u.saved_at, t0), _clock(u.until, t0))}")
        if a.gave_up is not None:
            out.append(f"     gave up: {a.gave_up}")
        if a.placed is not None:
            out.append(f"     next job on {a.placed}")
        if a.stop_asked_at is not None:
            out.append(f"     trained on after the notice; told to stop at "
                       f"{_clock(a.stop_asked_at, t0)}: {a.stop_why}")  # fmt: skip
    out += [f"  {r.line(_clock(r.at, t0))}" for r in st.resizes]
    out += [f"  {t.line(st.running)}" for t in st.tiers]
    if st.standard_node_hours:
        out.append(
            f"  used {st.node_hours:.3f} node-hours ({st.standard_node_hours:.3f} on standard "
            f"nodes), {st.gpu_hours:.3f} GPU-hours: ${st.cost:.2f} against "
            f"${st.cost_on_demand:.2f} on demand"
        )
        return out
    out.append(
        f"  used {st.node_hours:.3f} node-hours, {st.gpu_hours:.3f} GPU-hours: "
        f"${st.cost_preemptible:.2f} preemptible against ${st.cost_on_demand:.2f} on demand"
    )
    return out
