"""The drill's report as text: a timeline per run, the summary side by side, and the verdict."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from slurmpre.drill import report, verdict
from slurmpre.drill.timeline import Observed
from slurmpre.drill.verdict import SUMMARY_ROWS, missing, times_better

if TYPE_CHECKING:
    from slurmpre.drill.options import DrillResult


def _s(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _i(value: int | None) -> str:
    return "-" if value is None else str(value)


def timeline_lines(run: Observed, pace: float | None = None) -> list[str]:
    t0 = run.submitted_at
    lines = [f"{run.mode} (job {run.job_id}): {run.state}"]
    lines.append(
        f"  {'attempt':>7} {'nodes':<44} {'start s':>8} {'resumed':>7} {'last step':>9}  ended"
    )
    for a in report.attempts(run):
        start = None if a.started_at is None else a.started_at - t0
        lines.append(
            f"  {a.attempt:>7} {','.join(a.nodes) or '-':<44} {_s(start):>8} "
            f"{_i(a.resumed_step):>7} {_i(a.last_step):>9}  {a.ended}"
        )
    pre = report.preemptions(run, pace)
    if pre:
        lines.append(
            f"  {'drain':>7} {'moment':<12} {'node':<22} {'at s':>6} {'notice':>6} {'ckpt':>5} "
            f"{'restart':>7} {'resume':>6} {'lost':>4} {'no-train s':>10} {'drain->step s':>13} "
            f"{'capacity s':>10}"
        )
        for i, p in enumerate(pre, 1):
            lines.append(
                f"  {i:>7} {p.moment:<12} {p.node:<22} {p.drained_at - t0:>6.1f} "
                f"{_s(p.notice_seen_s):>6} {_i(p.checkpoint_step):>5} {_s(p.requeue_s):>7} "
                f"{_i(p.resumed_step):>6} {_i(p.steps_lost):>4} {_s(p.without_training_s):>10} "
                f"{_s(p.drain_to_first_step_s):>13} {_s(p.capacity_wait_s):>10}"
            )
            if (tier := p.tier_line()) is not None:
                lines.append(f"  {'':>7} {tier}")
        lines += _overlaps(pre)
    return lines


def _overlaps(pre: list[report.Preemption]) -> list[str]:
    """A line for each restart that several preemptions ended in."""
    out, said = [], set()
    for i, p in enumerate(pre, 1):
        group = tuple(sorted({i, *p.shared_with}))
        if len(group) > 1 and group not in said:
            said.add(group)
            names = ", ".join(map(str, group[:-1])) + f" and {group[-1]}"
            out.append(
                f"  drains {names} struck before the run trained again: one restart, its time "
                "without training split between them at their drains (docs/drill.md)"
            )
    return out


def _cell(value: object, digits: int | None) -> str:
    if value is None:
        return "-"
    if digits is None or isinstance(value, str):
        return str(value)
    return f"{value:.{digits}f}" if digits else str(round(value))  # type: ignore[call-overload]


def _ratio(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.2f}"


def summary_lines(summaries: list[report.Summary]) -> list[str]:
    """One column per run; with the seeds' recipe beside slurmpre, a column of how many
    times better slurmpre is, on every row that has a direction."""
    head = f"{'':38}" + "".join(f"{s.mode:>14}" for s in summaries)
    modes = [s.mode for s in summaries]
    pair = modes == ["seeds", "slurmpre"]
    lines = [head + (f"{'x better':>10}" if pair else "")]
    for label, key, digits, better in SUMMARY_ROWS:
        values = [getattr(s, key) for s in summaries]
        row = f"{label:38}" + "".join(f"{_cell(v, digits):>14}" for v in values)
        if pair and better and all(verdict.number(v) for v in values):
            row += f"{_ratio(times_better(values[0], values[1], better)):>10}"
        lines.append(row)
    if pair:
        lines.append(f"{'':38}(x better: how many times better slurmpre is than the seeds' recipe)")
    return lines


def render(result: DrillResult) -> list[str]:
    lines: list[str] = []
    ref = result.runs.get("reference")
    pace = report.step_seconds(ref)
    for name in ("slurmpre", "seeds"):
        if name in result.runs:
            lines += ["", *timeline_lines(result.runs[name], pace)]
    order = [n for n in ("seeds", "slurmpre") if n in result.runs]
    summaries = [report.summarize(result.runs[n], ref, prices=result.options.prices) for n in order]
    lines += [
        "",
        f"summary ({'' if result.slurm is None else f'Slurm {result.slurm}, '}"
        f"sandbox timings: {result.timings}; window {result.options.window:g} s;"
        f" seed {result.seed})",
        *summary_lines(summaries),
    ]
    if "capacity" in result.runs:
        from slurmpre.drill import capacity

        lines += capacity.lines(result.runs["capacity"])
    if "big-state" in result.runs:
        from slurmpre.drill import big_state

        lines += big_state.lines(result.runs["big-state"], result.options)
    for name, same in result.identical.items():
        lines.append(
            f"final weights of {name}: {'identical to' if same else 'DIFFERENT from'} "
            "the uninterrupted run's, bit for bit"
        )
    made, planned = len(result.runs["slurmpre"].hits), len(result.schedule)
    if made < planned:
        lines.append(
            f"(the drill made {made} of its {planned} planned preemptions: the training ended "
            "before the next one's moment; a longer run (--steps) makes them all)"
        )
    for s in summaries:
        if gaps := missing(s):
            lines.append(
                f"(a bug in the drill's report, not in the run: no figure for {s.mode}'s "
                + ", ".join(gaps)
                + ")"
            )
    if "seeds" in result.runs and result.timings != "stock":
        lines.append(
            "(tuned timings: the table compares, the drill does not require slurmpre to lead; "
            "on stock timings it does)"
        )
    failures = result.failures()
    lines.append("")
    lines.append(
        "slurmpre kept its promise: zero steps lost, identical weights"
        if not failures
        else "DRILL FAILED: " + "; ".join(failures)
    )
    return lines
