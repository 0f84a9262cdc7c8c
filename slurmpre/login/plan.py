"""How often to checkpoint on preemptible nodes, and what a useful GPU-hour then costs:
Daly's periodic interval against just in time (docs/plan.md: the model, a worked example).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurmpre import defaults
from slurmpre.errors import SlurmpreError, UsageError
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import Checkpoint, End, Notice, Record, Requeued, Start, Successor
from slurmpre.login import tier_costs
from slurmpre.login.tier_costs import TierCosts


@dataclass(frozen=True)
class Inputs:
    checkpoint_s: float
    mtbf_s: float
    restart_s: float
    window_s: float = float(defaults.PREEMPT_WINDOW)
    margin_s: float = float(defaults.SAFETY_MARGIN)
    notice_s: float = float(defaults.POLL_INTERVAL)
    price: float = defaults.ON_DEMAND_PRICE  # per GPU-hour
    discount: float = defaults.PREEMPTIBLE_DISCOUNT  # preemptible = price * (1 - discount)
    sources: tuple[str, ...] = ()  # where each measured value came from
    tier: TierCosts | None = None  # with local_dir: the save on the nodes and the pull

    def check(self) -> None:
        for name, value, low in (
            ("--checkpoint-seconds", self.checkpoint_s, 0.0),
            ("--mtbf", self.mtbf_s, 1e-9),
            ("--restart-seconds", self.restart_s, 0.0),
            ("--window", self.window_s, 1e-9),
            ("--margin", self.margin_s, 0.0),
            ("--notice-seconds", self.notice_s, 0.0),
            ("--price", self.price, 0.0),
        ):
            if not math.isfinite(value) or value < low:
                more = "more than 0" if low else "0 or more"
                raise UsageError(f"{name} {value:g}: must be a finite number, {more}")
        if not 0 <= self.discount < 1:
            raise UsageError(f"--discount {self.discount:g}: must be from 0 to below 1")


@dataclass(frozen=True)
class Plan:
    inputs: Inputs
    young_interval_s: float
    daly_interval_s: float
    periodic_goodput: float
    jit_fits: bool
    jit_goodput: float | None
    on_demand_cost: float  # per useful GPU-hour
    periodic_cost: float
    jit_cost: float | None

    def as_dict(self) -> dict[str, Any]:
        i = self.inputs
        return {
            "inputs": {
                "checkpoint_seconds": i.checkpoint_s,
                "mtbf_seconds": i.mtbf_s,
                "restart_seconds": i.restart_s,
                "window_seconds": i.window_s,
                "margin_seconds": i.margin_s,
                "notice_seconds": i.notice_s,
                "price_per_gpu_hour": i.price,
                "discount": i.discount,
                "measured": list(i.sources),
            },
            "periodic": {
                "young_interval_seconds": self.young_interval_s,
                "daly_interval_seconds": self.daly_interval_s,
                "goodput": self.periodic_goodput,
                "cost_per_useful_gpu_hour": self.periodic_cost,
            },
            "just_in_time": {
                "fits_in_window": self.jit_fits,
                "goodput": self.jit_goodput,
                "cost_per_useful_gpu_hour": self.jit_cost,
            },
            "on_demand_cost_per_gpu_hour": self.on_demand_cost,
            # With local_dir only (measured in the ledgers, or given).
            **({} if i.tier is None else {"state_off_the_node": tier_costs.as_dict(i, i.tier)}),
        }


def young(d: float, m: float) -> float:
    return math.sqrt(2 * d * m)


def daly(d: float, m: float) -> float:
    if d >= 2 * m:
        return m
    x = d / (2 * m)
    return math.sqrt(2 * d * m) * (1 + math.sqrt(x) / 3 + x / 9) - d


def periodic_goodput(tau: float, d: float, m: float, r: float) -> float:
    if tau <= 0:
        return 0.0
    try:
        return tau / (m * math.exp(r / m) * math.expm1((tau + d) / m))
    except OverflowError:  # a checkpoint or restart many times the MTBF: nothing gets done
        return 0.0


def make_plan(i: Inputs) -> Plan:
    i.check()
    d, m, r = i.checkpoint_s, i.mtbf_s, i.restart_s
    tau = daly(d, m)
    periodic = periodic_goodput(tau, d, m, r) if d > 0 else m / (m + r)
    fits = i.notice_s + d <= i.window_s - i.margin_s
    jit = m / (m + d + r) if fits else None
    pre = i.price * (1 - i.discount)
    return Plan(
        inputs=i,
        young_interval_s=young(d, m),
        daly_interval_s=tau,
        periodic_goodput=periodic,
        jit_fits=fits,
        jit_goodput=jit,
        on_demand_cost=i.price,
        periodic_cost=pre / periodic if periodic > 0 else math.inf,
        jit_cost=pre / jit if jit else None,
    )


@dataclass(frozen=True)
class Measured:
    checkpoint_s: float | None
    mtbf_s: float | None
    restart_s: float | None
    checkpoints: int
    preemptions: int
    running_s: float
    restarts: int = 0


def measure(records: list[Record]) -> Measured:
    """From attempt ledgers: the median checkpoint write, the running time per preemption
    (drain notices that ended an attempt), and the median restart: requeue -> the next
    attempt's start, or a successor's submission -> its start."""
    # The write to the shared volume: a flush's, when the checkpoint was saved on the nodes.
    writes = [
        w
        for r in records
        if isinstance(r, Checkpoint)
        if (w := r.seconds if r.flush_seconds is None else r.flush_seconds) is not None
    ]
    running = sum(r.seconds for r in records if isinstance(r, End))
    preempted = {(r.job, r.attempt) for r in records if isinstance(r, Notice) and r.kind == "drain"}
    # When each attempt started: its first step (an in-place restart later in the same
    # attempt is no restart from a requeue).
    starts: dict[tuple[str, int], float] = {}
    for r in records:
        if isinstance(r, Start) and r.time is not None:
            starts.setdefault((r.job, r.attempt), r.time)
    restarts = []
    for r in records:
        if isinstance(r, Requeued):
            nxt = starts.get((r.job, r.attempt + 1))
            if nxt is not None:
                restarts.append(nxt - r.requeued_at)
        elif isinstance(r, Successor):  # a new job took over: its submission -> its start
            nxt = starts.get((r.successor, 0))
            if nxt is not None:
                restarts.append(nxt - r.submitted_at)
    return Measured(
        checkpoint_s=statistics.median(writes) if writes else None,
        mtbf_s=running / len(preempted) if preempted and running > 0 else None,
        restart_s=statistics.median(restarts) if restarts else None,
        checkpoints=len(writes),
        preemptions=len(preempted),
        running_s=running,
        restarts=len(restarts),
    )


def ledgers(folders: list[Path], *, skip_unread: bool = False) -> list[Record]:
    """Every record of the ledgers of these checkpoint folders; one line naming a folder
    that has none, or with ``skip_unread`` none from it, nor from one that cannot be read
    (a job of the user's list may have been moved or never started)."""
    records: list[Record] = []
    for folder in folders:
        ledger = Ledger(folder, view=True)
        try:
            if ledger.path.is_file():
                records += ledger.records()
            elif not skip_unread:
                raise UsageError(f"{str(folder)!r} has no ledger ({ledger.path} does not exist)")
        except (OSError, SlurmpreError):
            if not skip_unread:
                raise
    return records


class Sources:
    """Each input of a plan: the option's value, else what the ledgers measured (said in
    `lines`), else one line asking for every option missing (`check`)."""

    def __init__(self, from_folders: bool, *, unit: str = "") -> None:
        self.from_folders, self.unit = from_folders, unit
        self.lines: list[str] = []
        self.missing: list[tuple[str, str]] = []  # (flag, what): neither given nor measured

    def pick(self, value: float | None, measured: float | None, flag: str, what: str) -> float:
        """The value; NaN when it is missing, until `check` refuses."""
        if value is not None:
            return value
        if measured is None:
            self.missing.append((flag, what))
            return math.nan
        self.lines.append(f"{what} {measured:.4g}{self.unit}")
        return measured

    def check(self) -> None:
        """One UsageError naming every input neither given nor measured."""
        if not self.missing:
            return
        where = "in the ledger(s)" if self.from_folders else "(no checkpoint folder given)"
        what = ", ".join(w for _, w in self.missing)
        flags = " ".join(f for f, _ in self.missing)
        raise UsageError(f"no {what} measured {where}: give {flags}")


@dataclass(frozen=True)
class Given:
    """What the user gave on the command line (None: measure it, or take the default)."""

    checkpoint_s: float | None = None
    mtbf_s: float | None = None
    restart_s: float | None = None
    window_s: float | None = None
    margin_s: float | None = None
    notice_s: float | None = None
    price: float = defaults.ON_DEMAND_PRICE
    discount: float = defaults.PREEMPTIBLE_DISCOUNT
    save_s: float | None = None  # with local_dir: a save on the nodes
    pull_s: float | None = None  # ... and the pull by the job that takes over


def inputs_from(
    folders: list[Path],
    given: Given,
    requeue_floor: Callable[[], int | None] | None = None,
    history: Callable[[], list[Path]] | None = None,
) -> Inputs:
    """The plan's inputs: what was given, else what the folders' ledgers measured (each
    named in ``sources``), else the defaults; a UsageError naming the flag that is missing.
    With no restart measured there, the restarts the user's other jobs measured
    (``history``: their checkpoint folders), else the running Slurm's requeue floor
    (``requeue_floor``; None: it does not answer)."""
    records = ledgers(folders)
    seen = measure(records)
    found = Sources(bool(folders), unit=" s")
    pick, sources = found.pick, found.lines

    def default(value: float | None, fallback: float) -> float:
        return fallback if value is None else value

    if (other := _restart_elsewhere(given, seen, folders, history, requeue_floor)) is not None:
        restart, said = other
        sources.append(said)
    else:
        restart = pick(given.restart_s, seen.restart_s, "--restart-seconds", "restart")
    checkpoint = pick(
        given.checkpoint_s, seen.checkpoint_s, "--checkpoint-seconds", "checkpoint write"
    )
    mtbf = pick(given.mtbf_s, seen.mtbf_s, "--mtbf", "running time per preemption")
    found.check()
    saved, pulled, flushed = tier_costs.measured(records)
    save = given.save_s if given.save_s is not None else saved
    pull = given.pull_s if given.pull_s is not None else pulled
    if given.save_s is None and saved is not None:
        sources.append(f"save on the nodes {saved:.4g} s")
    if given.pull_s is None and pulled is not None:
        sources.append(f"pull {pulled:.4g} s")
    tier = None if save is None else TierCosts(save, pull or 0.0, flushed)
    return Inputs(
        checkpoint_s=checkpoint,
        mtbf_s=mtbf,
        restart_s=restart,
        window_s=default(given.window_s, defaults.PREEMPT_WINDOW),
        margin_s=default(given.margin_s, defaults.SAFETY_MARGIN),
        notice_s=default(given.notice_s, defaults.POLL_INTERVAL),
        price=given.price,
        discount=given.discount,
        sources=tuple(sources),
        tier=tier,
    )


def _restart_elsewhere(
    given: Given,
    seen: Measured,
    folders: list[Path],
    history: Callable[[], list[Path]] | None,
    requeue_floor: Callable[[], int | None] | None,
) -> tuple[float, str] | None:
    """A restart measured by the user's other jobs, else Slurm's requeue floor: what a
    restart waits at most, when no successor can start at once."""
    if given.restart_s is not None or seen.restart_s is not None:
        return None
    if history is not None:
        mine = set(folders)
        others = ledgers([f for f in history() if f not in mine], skip_unread=True)
        if (theirs := measure(others)).restart_s is not None:
            return theirs.restart_s, (
                f"restart {theirs.restart_s:.4g} s: the median of {theirs.restarts} "
                "restart(s) your other jobs measured (none in the ledger(s) given)"
            )
    if requeue_floor is not None and (found := requeue_floor()) is not None:
        return float(found), (
            f"restart {found} s: the running Slurm's requeue floor (cred_expire + 1), "
            "the longest a restart waits for a node (none measured)"
        )
    return None


def lines(plan: Plan) -> list[str]:
    i = plan.inputs

    def money(value: float | None) -> str:
        return "-" if value is None else f"${value:.3f}"

    out = [
        f"checkpoint write {i.checkpoint_s:g} s, one preemption per {i.mtbf_s / 3600:.2f} h "
        f"of running, restart {i.restart_s:g} s, window {i.window_s:g} s "
        f"(margin {i.margin_s:g} s, notice within {i.notice_s:g} s)",
    ]
    if i.sources:
        out.append("measured: " + ", ".join(i.sources))
    out += [
        "",
        f"{'':38}{'goodput':>9}{'per useful GPU-hour':>22}",
        f"{'on-demand':38}{1.0:>9.3f}{money(plan.on_demand_cost):>22}",
        f"{'preemptible, periodic every ' + f'{plan.daly_interval_s:.0f} s':38}"
        f"{plan.periodic_goodput:>9.3f}{money(plan.periodic_cost):>22}",
    ]
    if plan.jit_goodput is not None:
        out.append(
            f"{'preemptible, just in time (slurmpre)':38}"
            f"{plan.jit_goodput:>9.3f}{money(plan.jit_cost):>22}"
        )
    else:
        out.append(
            f"just in time does not fit: notice {i.notice_s:g} s + write {i.checkpoint_s:g} s "
            f"> window {i.window_s:g} s - margin {i.margin_s:g} s; checkpoint periodically"
        )
    if i.tier is not None:
        out += tier_costs.lines(i, i.tier)
    daly_s, young_s = plan.daly_interval_s, plan.young_interval_s
    out.append(f"periodic interval: Daly {daly_s:.0f} s (Young {young_s:.0f} s)")
    return out
