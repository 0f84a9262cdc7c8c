"""Drill timelines drawn from a seed, without a cluster: what the report is computed from.

A small model of a drill run, for testing the report on many schedules. The scene
(nodes, window, return delay, start-up, step and save times) and the schedule of
moments come from the seed; the run then unfolds as slurmpre's or the seeds' recipe
would, and leaves what the drill records: the training's log, slurmpre's ledger,
Slurm samples of each job and the drains. Beside it, what the model knows to be
true (steps lost, when the run trained again after each drain, the time the run
spent without training) for the tests to hold the report to.

slurmpre (make-before-break): a drain's notice submits a successor, which starts on
a node in service (waiting for one if none is) and takes over once it has started
up; the drained attempt trains on until then or until its deadline. A successor
drained while it starts up (the drill's start-up moment) either hands over to its own
successor and never trains, or takes over and hands on at once: both happen.
The seeds' recipe trains through the window, dies at the removal, waits out the
requeue floor and resumes from its highest ``step-N``, complete or not.

Variants the draw mixes in: a node undrained before its removal, and a drain that
takes every other node out of service too (both nodes gone at once).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from slurmpre.drill.timeline import Hit, Observed, Sample
from slurmpre.folder import records

KINDS = ("startup", "checkpoint", "training")


@dataclass
class Scene:
    seed: int
    nodes: list[str]
    window: float
    return_after: float
    floor: float  # the seeds' requeue floor
    step: float
    save: float
    every: int
    steps: int
    moments: list[tuple[str, int]]  # (kind, steps into the attempt for "training")
    undrain: float  # chance that a drained node is back before its removal
    blackout: float  # chance that a drain takes every other node out too


def scene(seed: int) -> Scene:
    rng = random.Random(seed)
    count = rng.randint(1, 5)
    kinds = ["startup", "checkpoint"] if count >= 3 else []
    kinds += [rng.choice(KINDS) for _ in range(count - len(kinds))]
    rng.shuffle(kinds)
    return Scene(
        seed=seed,
        nodes=[f"gpu-preemptible-dp-{i}" for i in range(1, rng.choice((2, 2, 3)) + 1)],
        window=rng.choice((10.0, 30.0, 60.0)),
        return_after=rng.choice((1.0, 10.0, 45.0)),
        floor=rng.choice((6.0, 121.0)),
        step=rng.choice((0.1, 0.15, 0.3)),
        save=rng.choice((0.5, 1.0, 2.0)),
        every=rng.choice((10, 25, 60)),
        steps=rng.randint(100, 400),
        moments=[(k, rng.randint(3, 25) if k == "training" else 0) for k in kinds],
        undrain=rng.choice((0.0, 0.0, 0.3)),
        blackout=rng.choice((0.0, 0.3, 0.6)),
    )


@dataclass
class Truth:
    """What the model knows happened."""

    steps_lost: int = 0
    back_at: dict[int, float] = field(default_factory=dict)  # hit index -> training again
    without_training: float = 0.0  # the run's time without training between its attempts
    rode_out: set[int] = field(default_factory=set)  # hits the drained attempt rode out


@dataclass
class _Attempt:
    k: int
    job: str
    node: str
    submitted: float
    start: float
    ready: float
    drained: float | None = None
    ended: bool = False


class Model:
    def __init__(self, sc: Scene, mode: str) -> None:
        self.sc, self.mode = sc, mode
        self.rng = random.Random(sc.seed * 7 + (mode == "seeds"))
        self.log: list[dict[str, Any]] = []
        self.ledger: list[dict[str, Any]] = []
        self.samples: list[Sample] = []
        self.hits: list[Hit] = []
        self.outages: list[Hit] = []
        self.truth = Truth()
        self.attempts: list[_Attempt] = []
        self.moments = list(sc.moments)
        self.trained: list[tuple[float, float]] = []  # each attempt's first and last step

    # -- the cluster ---------------------------------------------------------------
    def _out(self, node: str, t: float) -> bool:
        return any(
            h.node == node and h.drained_at <= t and (h.returned_at is None or t < h.returned_at)
            for h in [*self.hits, *self.outages]
        )

    def _held(self) -> set[str]:
        """Nodes a live attempt of the run holds and no drain touched (a drained node's
        attempt dies with it or, the node undrained, shares it: a node has CPUs to spare)."""
        return {x.node for x in self.attempts if not x.ended and x.drained is None}

    def _place(self, after: float, busy: set[str]) -> tuple[float, str]:
        """The first moment from ``after`` that a node is in service and free, and which."""
        times = sorted(
            {after}
            | {h.returned_at for h in [*self.hits, *self.outages] if h.returned_at is not None}
        )
        for t in (t for t in times if t >= after):
            free = [n for n in self.sc.nodes if n not in busy and not self._out(n, t + 1e-6)]
            if free:
                return t + 0.4, free[0]
        raise AssertionError("no node ever comes back")  # every drain returns

    def _drain(self, a: _Attempt, at: float, kind: str) -> None:
        sc = self.sc
        a.drained = at
        if self.rng.random() < sc.undrain:
            hit = Hit(kind, a.k, a.node, at, None, at + self.rng.uniform(1, sc.window - 1))
        else:
            hit = Hit(kind, a.k, a.node, at, at + sc.window, at + sc.window + sc.return_after)
        self.hits.append(hit)
        if self.rng.random() < sc.blackout:  # every other node in service goes too
            for n in sc.nodes:
                if n not in self._held() and not self._out(n, at):
                    back = at + sc.window + self.rng.uniform(0, 2 * sc.return_after)
                    self.outages.append(Hit("capacity", -1, n, at, at + sc.window, back))

    def _new(self, submitted: float, busy: set[str]) -> _Attempt:
        start, node = self._place(submitted + 1.0, busy)
        k = len(self.attempts)
        job = str(10 + k) if self.mode == "slurmpre" else "10"
        a = _Attempt(k, job, node, submitted, start, start + self.rng.uniform(3, 9))
        self.attempts.append(a)
        self.samples.append(Sample(submitted, "PENDING", k, (), job))
        self.samples.append(Sample(start, "RUNNING", k, (node,), job))
        return a

    def _ended(self, a: _Attempt, at: float, state: str = "COMPLETED") -> None:
        a.ended = True
        pending = self.mode == "seeds" and state == "PENDING"
        self.samples.append(Sample(at, state, a.k + pending, (), a.job))

    # -- the training ---------------------------------------------------------------
    def _event(self, a: _Attempt, event: str, t: float, **fields: Any) -> None:
        self.log.append({"event": event, "attempt": a.k, "t": t, **fields})

    def _train(
        self,
        a: _Attempt,
        t: float,
        step: int,
        *,
        until: float,
        hit_after: int | None = None,
        hit_in_save: bool = False,
    ) -> tuple[float, int, float | None, bool]:
        """Train ``a`` from ``step`` at ``t`` until ``until`` or the end. Returns (time, step,
        the drain's time if the moment struck, whether a save was cut short)."""
        sc, done = self.sc, 0
        while step < sc.steps and t + sc.step <= until:
            t += sc.step
            step += 1
            done += 1
            self._event(a, "step", t, step=step)
            if hit_after is not None and done == hit_after:
                return t, step, t + 0.01, False
            if step % sc.every == 0 and step < sc.steps:
                self._event(a, "save-start", t, step=step, why="periodic")
                if hit_in_save:
                    return t, step, t + sc.save / 2, True
                if t + sc.save > until:  # killed while writing
                    return until, step, None, True
                t += sc.save
                self._event(a, "save-end", t, step=step, why="periodic")
        return t, step, None, False

    def run(self) -> Observed:
        return self._slurmpre() if self.mode == "slurmpre" else self._seeds()

    def _finish(self, a: _Attempt, t: float, step: int) -> Observed:
        self._event(a, "done", t + 0.05, step=step)
        self._ended(a, t + 0.5)
        jobs = list(dict.fromkeys(x.job for x in self.attempts))
        # A successor is a job of its own (its restart count 0); the recipe's one job restarts.
        ids = {x.k: (x.job, 0 if self.mode == "slurmpre" else x.k) for x in self.attempts}
        return Observed(
            self.mode, jobs[0], 0.0, t + 0.5, "COMPLETED", self.log, self.samples, self.hits,
            self.ledger, attempt_ids=ids, jobs=jobs, capacity=tuple(self.sc.nodes),
            nodes_needed=1, outages=self.outages,
        )  # fmt: skip

    def _moment(self) -> tuple[str, int] | None:
        return self.moments.pop(0) if self.moments else None

    # -- slurmpre -------------------------------------------------------------------
    def _begin(self, a: _Attempt, t: float, step: int) -> None:
        path = f"/c/step-{step:08d}" if step else None
        self._event(a, "begin", t, resumed_step=step, resume_path=path, world=1)

    def _starting(self, a: _Attempt, kind: str = "startup") -> None:
        """The drill's start-up moment: a drain while ``a`` starts up."""
        self._drain(a, a.start + (a.ready - a.start) * self.rng.uniform(0.05, 0.95), kind)

    def _notice(self, a: _Attempt) -> _Attempt:
        """The watcher sees the drain: the ledger says so, and a successor is submitted."""
        assert a.drained is not None
        seen = a.drained + self.rng.uniform(0.1, 1.0)
        nxt = self._new(seen, self._held())
        base = {"job": a.job, "attempt": 0, "time": seen}
        notice = records.Notice(**base, kind="drain", node=a.node, reason="preempted",
                                seen_at=seen, first=True)  # fmt: skip
        handed = records.Successor(**base, successor=nxt.job, excluded=(a.node,), why="notice",
                                   submitted_at=seen)  # fmt: skip
        self.ledger += [notice.to_json(), handed.to_json()]
        return nxt

    def _checkpoint(self, a: _Attempt, t: float, step: int) -> float:
        self._event(a, "save-start", t, step=step, why="notice")
        self._event(a, "save-end", t + self.sc.save, step=step, why="notice")
        self.ledger.append(records.Checkpoint(job=a.job, attempt=0, step=step,
                                              path=f"/c/step-{step:08d}", after_notice=True,
                                              time=t + self.sc.save).to_json())  # fmt: skip
        return t + self.sc.save

    def _until_moment(
        self, a: _Attempt, t: float, step: int, moment: tuple[str, int] | None
    ) -> tuple[float, int, float | None]:
        """Train ``a`` until the moment strikes it (its drain time) or the training ends."""
        kind = moment[0] if moment else None
        t1, step1, hit_at, cut = self._train(
            a, t, step, until=1e9, hit_after=moment[1] if kind == "training" else None,
            hit_in_save=kind == "checkpoint",
        )  # fmt: skip
        self._note_first(a, step, step1)
        if hit_at is not None:
            self._drain(a, hit_at, kind or "training")
        if cut:  # the save the drain struck goes on
            t1 += self.sc.save
            self._event(a, "save-end", t1, step=step1, why="periodic")
        return t1, step1, hit_at

    def _train_on(self, a: _Attempt, t: float, step: int, until: float) -> tuple[float, int]:
        t1, step1, _, _ = self._train(a, t, step, until=max(until, t))
        self._note_first(a, step, step1)
        return t1, step1

    def _slurmpre(self) -> Observed:
        sc = self.sc
        a = self._new(0.0, set())
        moment = self._moment()
        t, step = a.ready, 0
        self._begin(a, t, step)
        if moment and moment[0] == "startup":
            self._starting(a)
            moment = self._moment()
        while True:
            if a.drained is None:
                t, step, hit_at = self._until_moment(a, t, step, moment)
                if hit_at is None:
                    return self._finish(a, t, step)
                moment = self._moment()
            assert a.drained is not None
            # The notice submits a successor; the drill may strike each one as it starts.
            chain = [self._notice(a)]
            while moment and moment[0] == "startup":
                self._starting(chain[-1])
                moment = self._moment()
                chain.append(self._notice(chain[-1]))
            last = chain[-1]
            # The drained trainer checkpoints, trains on until the last successor has
            # started up (or its deadline), and stops with a checkpoint.
            t = self._checkpoint(a, max(t, a.drained + 0.5), step)
            t, step = self._train_on(a, t, step, min(last.ready, a.drained + sc.window * 2 / 3))
            if step >= sc.steps:
                for s in chain:
                    self._ended(s, t + 1)
                return self._finish(a, t, step)
            t = self._checkpoint(a, t, step)
            self._ended(a, t + 0.3)
            # A successor struck while starting either hands on and never trains, or (the
            # last one not ready yet) takes over and hands on at once.
            taker = next((s for s in chain[:-1] if s.ready <= t and self.rng.random() < 0.5), None)
            if taker is not None and taker.drained is not None:
                t = max(t, taker.ready) + 0.2
                self._begin(taker, t, step)
                t = self._checkpoint(taker, t, step)
                t, step = self._train_on(
                    taker, t, step, min(last.ready, taker.drained + sc.window * 2 / 3)
                )
                if step >= sc.steps:
                    self._ended(last, t + 1)
                    return self._finish(taker, t, step)
                t = self._checkpoint(taker, t, step)
            for s in chain[:-1]:
                self._ended(s, max(s.ready, t) + 0.3)
            a = last
            t = max(t, a.ready) + 0.2
            self._begin(a, t, step)

    def _note_first(self, a: _Attempt, before: int, after: int) -> None:
        """The truth, once ``a`` has trained: the drains it recovers from, the time the run
        went without training before it."""
        if after <= before:
            return
        steps = [e["t"] for e in self.log if e["attempt"] == a.k and e["event"] == "step"]
        first, last = steps[0], steps[-1]
        if self.trained and self.trained[-1][0] == first:
            self.trained[-1] = (first, last)
            return
        if self.trained:
            self.truth.without_training += first - self.trained[-1][1]
        elif a.k:  # struck before anything trained: from the first attempt's start-up
            begun = min(e["t"] for e in self.log if e["event"] == "begin")
            self.truth.without_training += first - begun
        self.trained.append((first, last))
        for i, h in enumerate(self.hits):
            if h.attempt < a.k and i not in self.truth.back_at:
                self.truth.back_at[i] = first

    # -- the seeds' recipe ------------------------------------------------------------
    def _seeds(self) -> Observed:
        sc = self.sc
        a = self._new(0.0, set())
        saved: int | None = None  # the highest step-N folder, complete or not
        step, t = 0, 0.0
        while True:
            moment = self._moment()
            resumed = saved if a.k and saved is not None else 0
            t = a.ready
            self._begin(a, t, resumed)
            if a.k:
                self.truth.steps_lost += max(step - resumed, 0)
            step = resumed
            if moment and moment[0] == "startup":
                self._starting(a)
            else:
                t, step, hit_at = self._until_moment(a, t, step, moment)
                if hit_at is None:
                    return self._finish(a, t, step)
            hit = self.hits[-1]
            # It trains through the window and dies at the removal, unless the node is
            # back before then (it rides the preemption out).
            until = hit.removed_at if hit.removed_at is not None else 1e9
            t, step = self._train_on(a, t, step, until)
            if hit.removed_at is None or step >= sc.steps:
                if hit.removed_at is None:
                    self.truth.rode_out.add(len(self.hits) - 1)
                self.moments = []  # the drill strikes an attempt once: no moment comes
                return self._finish(a, t, step)
            saved = max((e["step"] for e in self.log if e["event"] == "save-start"), default=None)
            a.ended = True
            self._ended(a, until, "PENDING")
            a = self._new(until + sc.floor, set())


def generate(seed: int, mode: str) -> tuple[Observed, Truth, Scene]:
    sc = scene(seed)
    model = Model(sc, mode)
    return model.run(), model.truth, sc
