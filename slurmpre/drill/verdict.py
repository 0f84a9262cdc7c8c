"""What the drill's figures mean for slurmpre: which way each counts, what a completed run
must have, and where slurmpre is behind the seeds' recipe (what fails the drill)."""

from __future__ import annotations

import math

from slurmpre.drill import report
from slurmpre.slurm import states

# (label, field, digits, which way is better: "lower", "higher", or None for no ratio)
SUMMARY_ROWS: tuple[tuple[str, str, int | None, str | None], ...] = (
    ("final state", "state", None, None),
    ("steps trained", "steps", 0, None),
    ("preemptions", "preemptions", 0, None),
    ("steps lost", "steps_lost", 0, "lower"),
    ("steps computed (with repeats)", "steps_computed", 0, "lower"),
    ("training time lost / preemption (s)", "training_lost_per_preemption_s", 1, "lower"),
    ("mean drain -> first new step (s)", "mean_drain_to_first_step_s", 1, "lower"),
    ("  of it, waiting for capacity (s)", "mean_capacity_wait_s", 1, None),
    ("  of it, the run's own (s)", "mean_own_latency_s", 1, "lower"),
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
# The figures a run with no preemption has none of (they are per preemption), and those
# that need the uninterrupted reference run.
PER_PREEMPTION = frozenset({
    "training_lost_per_preemption_s", "mean_drain_to_first_step_s", "mean_capacity_wait_s",
    "mean_own_latency_s",
})  # fmt: skip
NEEDS_REFERENCE = frozenset(
    {"uninterrupted_wall_s", "wall_ratio", "goodput", "cost_on_demand_uninterrupted"}
)


def times_better(seeds: float, ours: float, better: str) -> float:
    """How many times better slurmpre's value is than the seeds' recipe's (> 1: better,
    < 1: worse), whichever way the figure counts: ``better`` is "lower" or "higher"."""
    good, bad = (seeds, ours) if better == "lower" else (ours, seeds)
    if bad == 0:
        return 1.0 if good == 0 else math.inf
    return good / bad


def missing(summary: report.Summary) -> list[str]:
    """The figures a completed run's summary lacks: each one a bug in the report."""
    if summary.state != states.COMPLETED:
        return []
    exempt = set(NEEDS_REFERENCE) if summary.uninterrupted_wall_s is None else set()
    if summary.preemptions == 0:
        exempt |= PER_PREEMPTION
    return [
        label
        for label, key, _, _ in SUMMARY_ROWS
        if key not in exempt and getattr(summary, key) is None
    ]


def behind(seeds: report.Summary, ours: report.Summary) -> list[str]:
    """Where slurmpre is behind the seeds' recipe, on what users pay for. A figure either
    run lacks compares nothing (a missing figure of a completed run is `missing`'s)."""
    out = []
    for label, key in MUST_LEAD:
        theirs, mine = getattr(seeds, key), getattr(ours, key)
        if theirs is not None and mine is not None and mine > theirs:
            out.append(
                f"it is behind the seeds' recipe on {label} ({mine:.4g} against {theirs:.4g})"
            )
    return out


def number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)
