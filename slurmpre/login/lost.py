"""The steps an attempt lost: those the next attempt trains again.

Counted where the ledger shows them (`counted`). For an attempt lost without a notice
checkpoint (`unseen`), slurmpre does not see the training's steps, only its saves: the
pace between them, times the time from the newest save to the training's end (an
estimate, ``~N``) or to the next start (a bound, ``<=N``), at most the steps between two
saves (docs/login.md, ``unseen``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass

from slurmpre.folder.records import AttemptRecord, Checkpoint, End, Saved, Start

Save = tuple[int, float, float]  # step, when the training went on after it, its stall (s)


@dataclass(frozen=True)
class Unseen:
    """At most ``steps`` steps lost: ``saved - since`` known, and what the training went
    on with from ``saved_at`` at ``rate`` steps/s until ``until`` (capped at ``interval``,
    the steps between its last two saves)."""

    steps: int
    about: bool  # an estimate (``until`` is the training's end, not capped); else a bound
    since: int  # the step the next attempt resumed from
    saved: int  # the attempt's newest save (or, ``resumed``, the step it resumed from)
    saved_at: float
    until: float
    rate: float  # steps per second between saves
    interval: int
    resumed: bool = False  # it saved nothing: from its start, start-up included
    ended: bool = False  # ``until`` is its training's end, else the next attempt's start

    @property
    def shown(self) -> str:
        return f"~{self.steps}" if self.about else f"<={self.steps}"

    def line(self, at: str, until: str) -> str:
        what = "its training ended" if self.ended else "the next attempt started"
        known = f"{self.saved - self.since} + " if self.saved > self.since else ""
        after = "it resumed from" if self.resumed else "its save of"
        return (
            f"steps lost {self.shown}: {known}what it trained after {after} step "
            f"{self.saved} at {at} until {what} at {until}, at {self.rate:.2g} steps/s, "
            f"at most the {self.interval} between two saves"
        )


def counted(checkpoint_step: int | None, newest: int | None, nxt: Start | None) -> int | None:
    """Steps the next attempt trains again: none when it resumed from the notice's
    checkpoint; else from the newest checkpoint seen (at least: later steps are unseen)."""
    if nxt is None:
        return None
    if checkpoint_step is not None and nxt.step == checkpoint_step:
        return 0
    if newest is None or nxt.step is None:
        return None
    return max(newest - nxt.step, 0) if checkpoint_step or newest > nxt.step else None


def saves(recs: Iterable[AttemptRecord]) -> list[Save]:
    """An attempt's saves, by step: when its training went on after each (the save on the
    nodes, else the folder's commit) and how long each stopped it."""
    by_step: dict[int, Save] = {}
    for r in recs:
        if r.time is None or not isinstance(r, Saved | Checkpoint):
            continue
        if isinstance(r, Checkpoint) and r.flush_seconds is not None:
            continue  # a flush's commit, long after the training went on (a restart's too)
        save = (r.step, r.time, r.seconds or 0.0)
        if r.step not in by_step or save[1] < by_step[r.step][1]:
            by_step[r.step] = save
    return [by_step[s] for s in sorted(by_step)]


def pace(attempts: Iterable[list[Save]]) -> tuple[float, int] | None:
    """Steps per second between consecutive saves of each attempt, the time each save
    stopped the training taken out; and the steps between the last two. None without two
    saves in one attempt."""
    pairs = [(a, b) for own in attempts for a, b in itertools.pairwise(own) if b[0] > a[0]]
    steps = sum(b[0] - a[0] for a, b in pairs)
    seconds = sum(b[1] - a[1] - b[2] for a, b in pairs)
    if not pairs or seconds <= 0:
        return None
    return steps / seconds, pairs[-1][1][0] - pairs[-1][0][0]


def unseen(
    recs: list[AttemptRecord], start: Start | None, nxt: Start | None, run: list[list[Save]]
) -> Unseen | None:
    """What attempt ``recs`` lost, with no count known otherwise: resumed from by ``nxt``,
    its pace from its own saves (else from the saves of the run's other attempts, ``run``:
    the same training). None when the next attempt resumed from no step it had reached, or
    when the ledger holds no time or pace for it."""
    own = saves(recs)
    saved, saved_at = own[-1][:2] if own else (start.step, start.time) if start else (None, None)
    end = next((r for r in recs if isinstance(r, End)), None)
    until = end.time if end is not None else nxt.time if nxt is not None else None
    measured = pace([own]) or pace(run)
    if nxt is None or nxt.step is None or saved is None or saved < nxt.step:
        return None
    if saved_at is None or until is None or measured is None:
        return None
    rate, interval = measured
    trained = round(rate * max(until - saved_at, 0.0))
    capped = trained > interval
    return Unseen(
        steps=saved - nxt.step + min(trained, interval),
        about=end is not None and not capped and bool(own),  # from a start: a bound
        since=nxt.step,
        saved=saved,
        saved_at=saved_at,
        until=until,
        rate=rate,
        interval=interval,
        resumed=not own,
        ended=end is not None,
    )
