"""Preemptible or standard: where a run's next attempt trains, decided from facts alone.

The same function answers the job (at each hand-over, while a successor or a requeue
waits for nodes, and at each checkpoint on standard nodes), `slurmpre plan --deadline`
and the trace replay in ``bench/deadline.py``: what is measured there is what runs.

Uniform Progress with a safety net ("Can't Be Late", NSDI'24): its rules, case by case,
are docs/deadlines.md's table.
"""

from __future__ import annotations

from dataclasses import dataclass

PREEMPTIBLE = "preemptible"
STANDARD = "standard"
KINDS = (PREEMPTIBLE, STANDARD)
# What the run is doing when the question is asked.
TRAINING = "training"
WAITING = "waiting"  # for nodes: a pending successor or requeue, or a restart
# Preemptions faster than progress this many times in a row: a run that may move goes to
# standard nodes; one that may not waits before its next attempt (`backoff`).
STORM = 3
# Back to preemptible only this far ahead of the line, in restarts' worth of steps: a
# move pays for itself before the run can fall behind again (no moving back and forth).
HYSTERESIS = 1.0


@dataclass(frozen=True)
class Goals:
    """What the spec asks of the run's placement (all unset: it stays where it asked)."""

    deadline: str | None = None  # as the spec gives it (`placement.deadline`)
    total_steps: int | None = None
    fallback_after: int | None = None
    max_wait_s: float | None = None
    max_preemptions: int | None = None
    max_cost: float | None = None

    @property
    def may_move(self) -> bool:
        return bool(self.deadline or self.fallback_after or self.max_wait_s)


@dataclass(frozen=True)
class Situation:
    """What the run knows at ``now`` (Unix seconds)."""

    now: float
    on: str  # PREEMPTIBLE or STANDARD: where it trains, or last asked to
    doing: str  # TRAINING or WAITING
    waiting_s: float = 0.0  # how long it has waited for preemptible nodes, this time
    preemptions: int = 0  # preemptions of the run so far
    # The deadline, and what progress means.
    start: float | None = None  # the run's first submission
    deadline: float | None = None
    steps_done: int = 0
    total_steps: int | None = None
    rate: float | None = None  # steps per second while training, measured
    restart_s: float = 120.0  # from the decision to training again (start, load)
    idle_preemptible: bool = False  # enough idle preemptible nodes for the run now
    # Without a deadline (both also apply with one).
    fallback_after: int | None = None
    max_wait_s: float | None = None
    storm: int = 0  # the last attempts in a row preempted before they trained 2 restarts


@dataclass(frozen=True)
class Decision:
    where: str  # PREEMPTIBLE or STANDARD
    why: str  # one line, for the ledger and status
    slack_s: float | None = None  # time left minus work left minus one restart
    line_step: float | None = None  # where Uniform Progress says the run should be


def moving(s: Situation, d: Decision) -> bool:
    return d.where != s.on


def slack(s: Situation) -> float | None:
    """Seconds the run can still lose and finish by its deadline on standard nodes
    (one restart to get there counted); None without a deadline, a total or a rate."""
    if s.deadline is None or s.total_steps is None or not s.rate or s.rate <= 0:
        return None
    left = max(0, s.total_steps - s.steps_done) / s.rate
    return s.deadline - s.now - left - s.restart_s


def line(s: Situation) -> float | None:
    """The step Uniform Progress expects at ``now``; None without what it needs."""
    if s.deadline is None or s.total_steps is None or s.start is None:
        return None
    span = s.deadline - s.start
    if span <= 0:
        return float(s.total_steps)
    share = min(1.0, max(0.0, (s.now - s.start) / span))
    return s.total_steps * share


def decide(s: Situation) -> Decision:
    """Where the run should train from now on, and why (see the module's text)."""
    room, expected = slack(s), line(s)

    def say(where: str, why: str) -> Decision:
        return Decision(where, why, room, expected)

    if s.fallback_after is not None and s.preemptions >= s.fallback_after:
        return say(STANDARD, f"{s.preemptions} preemptions: fallback_after = {s.fallback_after}")
    moves = s.fallback_after is not None or s.max_wait_s is not None or s.deadline is not None
    if s.on == PREEMPTIBLE and moves and s.storm >= STORM:
        return say(STANDARD, f"{s.storm} preemptions in a row came faster than progress")
    if s.on == STANDARD and (room is None or expected is None):
        # Moved without a deadline (fallback_after or max_wait): it stays.
        return say(STANDARD, "on standard nodes, with no deadline that would move it back")
    waited_too_long = s.max_wait_s is not None and s.waiting_s >= s.max_wait_s
    if s.doing == WAITING and s.on == PREEMPTIBLE and waited_too_long:
        return say(STANDARD, f"waited {s.waiting_s:.0f} s for preemptible nodes (max_wait)")
    if room is None or expected is None:
        return say(s.on, "no deadline: the nodes it asked for")
    # Enough to survive one more preemption: its restart, and a wait as long as that.
    guard = s.restart_s
    behind = s.steps_done < expected
    if s.on == PREEMPTIBLE:
        if room <= guard:
            return say(STANDARD, f"slack {room:.0f} s: one more preemption would miss the deadline")
        if s.doing == WAITING and behind and not s.idle_preemptible:
            why = f"behind the line ({s.steps_done} < {expected:.0f}), no preemptible node idle"
            return say(STANDARD, why)
        return say(PREEMPTIBLE, f"slack {room:.0f} s, at or ahead of the line ({expected:.0f})")
    ahead = s.steps_done >= expected + HYSTERESIS * s.restart_s * (s.rate or 0.0)
    if s.idle_preemptible and ahead and room > 2 * guard + s.restart_s:
        return say(PREEMPTIBLE, f"preemptible nodes idle, ahead of the line, slack {room:.0f} s")
    return say(STANDARD, f"on standard nodes: slack {room:.0f} s, line {expected:.0f}")


def backoff(storm: int) -> float:
    """Seconds a run that may not move waits before its next attempt after ``storm``
    preemptions in a row faster than progress: none below `STORM`, then 1, 2, 4 ... min,
    at most 30."""
    if storm < STORM:
        return 0.0
    return float(min(60.0 * 2 ** (storm - STORM), 1800.0))
