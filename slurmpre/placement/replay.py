"""A run replayed against a trace of preemptible capacity, under each placement policy.

The trace: preemptible capacity comes and goes (a two-state process, exponential
periods: in service a mean ``up_s``, gone a mean ``down_s``, so it is there
``up_s / (up_s + down_s)`` of the time). A run training on preemptible nodes when
capacity goes is preempted: it checkpoints just in time (``checkpoint_s``, no step
lost), then waits for capacity (or moves). Standard nodes are always there. Every
start costs ``restart_s`` held but not training; a move while training is make-before-
break (both kinds held for ``restart_s``, then a checkpoint). Price: standard 1 per
node-second, preemptible ``1 - discount``.

`policy.decide` makes every choice of the ``fallback`` policy, as it does in a job:
`bench/deadline.py` and `slurmpre plan --deadline` measure the code that runs.
"""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass

from slurmpre import defaults
from slurmpre.placement.policy import (
    PREEMPTIBLE,
    STANDARD,
    TRAINING,
    WAITING,
    Decision,
    Situation,
    decide,
)

POLICIES = ("always-preemptible", "always-standard", "fallback")
TICK = 30.0  # seconds between the replay's decisions (a job's poll is 5 s; close enough)


@dataclass(frozen=True)
class Scene:
    """One run and the capacity it meets (seconds)."""

    work_s: float  # training time the run needs
    deadline_s: float | None  # from its first submission
    up_s: float  # mean time preemptible capacity stays (= mean time between preemptions)
    down_s: float  # mean time it stays away (the wait after a preemption)
    restart_s: float = 120.0
    checkpoint_s: float = 30.0
    discount: float = defaults.PREEMPTIBLE_DISCOUNT
    fallback_after: int | None = None
    max_wait_s: float | None = None

    @property
    def availability(self) -> float:
        return self.up_s / (self.up_s + self.down_s)


@dataclass(frozen=True)
class Outcome:
    policy: str
    finished_s: float | None  # None: not finished within the horizon
    met: bool  # finished by the deadline (no deadline: finished)
    cost: float  # standard node-seconds' worth
    held_s: float  # node-seconds held
    wasted_s: float  # node-seconds held without training
    preemptions: int
    moves: int


def capacity(scene: Scene, horizon: float, rng: random.Random) -> list[tuple[float, float]]:
    """The outages of one trace: (from, to) seconds, in order, up to ``horizon``."""
    out, t = [], 0.0
    up = rng.random() < scene.availability  # the state at time 0, from the steady mix
    while t < horizon:
        if up:
            t += rng.expovariate(1 / scene.up_s)
        else:
            end = t + rng.expovariate(1 / scene.down_s)
            out.append((t, end))
            t = end
        up = not up
    return out


class _Run:
    """One run's state through the replay (seconds since its first submission)."""

    def __init__(self, scene: Scene, outages: list[tuple[float, float]], policy: str) -> None:
        self.scene, self.outages, self.policy = scene, outages, policy
        self.starts = [a for a, _ in outages]
        self.on = STANDARD if policy == "always-standard" else PREEMPTIBLE
        self.doing = WAITING
        self.busy = scene.restart_s  # starting (or checkpointing) before it can train
        self.done = 0.0
        self.waited_since = 0.0
        self.preemptions = self.moves = 0
        self.cost = self.held = self.wasted = 0.0

    def up(self, t: float) -> bool:
        i = bisect.bisect_right(self.starts, t) - 1
        return i < 0 or t >= self.outages[i][1]

    def choose(self, t: float) -> Decision:
        s = self.scene
        if self.policy != "fallback":
            return Decision(self.on, self.policy)
        return decide(
            Situation(
                now=t,
                on=self.on,
                doing=self.doing,
                waiting_s=t - self.waited_since if self.doing == WAITING else 0.0,
                preemptions=self.preemptions,
                start=0.0,
                deadline=s.deadline_s,
                steps_done=int(self.done),
                total_steps=int(s.work_s),
                rate=1.0,
                restart_s=s.restart_s,
                idle_preemptible=self.up(t),
                fallback_after=s.fallback_after,
                max_wait_s=s.max_wait_s,
            )
        )

    def charge(self, kind: str, seconds: float, training: bool) -> None:
        price = 1.0 if kind == STANDARD else 1.0 - self.scene.discount
        self.cost += price * seconds
        self.held += seconds
        if not training:
            self.wasted += seconds

    def tick(self, t: float, dt: float) -> None:
        s = self.scene
        if self.on == PREEMPTIBLE and self.doing == TRAINING and not self.up(t):
            self.preemptions += 1  # capacity taken back: a checkpoint, then a wait
            self.charge(PREEMPTIBLE, s.checkpoint_s, training=False)
            self.doing, self.waited_since = WAITING, t
        d = self.choose(t)
        if d.where != self.on:
            self.moves += 1
            if self.doing == TRAINING:  # make-before-break: the new nodes start first
                self.charge(d.where, s.restart_s, training=False)
                self.charge(self.on, s.checkpoint_s, training=False)
                self.busy = s.checkpoint_s
            else:
                self.busy = s.restart_s
            self.on, self.doing = d.where, TRAINING
        if self.doing == WAITING:
            if self.on == STANDARD or self.up(t):
                self.doing, self.busy = TRAINING, s.restart_s
            else:
                return  # pending: costs nothing
        spent = min(dt, self.busy)
        self.busy -= spent
        if spent:
            self.charge(self.on, spent, training=False)
        if dt > spent:
            self.charge(self.on, dt - spent, training=True)
            self.done += dt - spent


def replay(scene: Scene, policy: str, outages: list[tuple[float, float]]) -> Outcome:
    """``policy`` through one trace, until the run's work is done (or a horizon of
    four times the work, plus its deadline)."""
    run = _Run(scene, outages, policy)
    horizon = 4 * scene.work_s + (scene.deadline_s or 0) + 10 * scene.down_s
    t = 0.0
    while run.done < scene.work_s and t < horizon:
        run.tick(t, TICK)
        t += TICK
    finished = t if run.done >= scene.work_s else None
    met = finished is not None and (scene.deadline_s is None or finished <= scene.deadline_s)
    return Outcome(
        policy, finished, met, run.cost, run.held, run.wasted, run.preemptions, run.moves
    )


def replay_all(scene: Scene, traces: int, seed: int) -> dict[str, list[Outcome]]:
    """Every policy through the same ``traces`` capacity traces (seeded)."""
    rng = random.Random(seed)
    horizon = 4 * scene.work_s + (scene.deadline_s or 0) + 10 * scene.down_s
    out: dict[str, list[Outcome]] = {p: [] for p in POLICIES}
    for _ in range(traces):
        outages = capacity(scene, horizon, rng)
        for p in POLICIES:
            out[p].append(replay(scene, p, outages))
    return out
