"""Where a run is after a notice: one phase at a time, timed on one clock.

Each phase is what the notice file every rank reads (`notice`) asks of the training::

    QUIET --a notice--> GOING_ON --told to stop--> STOPPING --decided--> ENDED
      |                                               ^
      +--a notice, nothing on its way to take over ---+
      +--a grow onto idle nodes--> GROWING -----------+

- GOING_ON: every rank is asked to checkpoint; a script that can goes on training after
  its notice checkpoint (make before break: a successor, or the next step beside this
  one, is on its way) until it is told to stop.
- GROWING: a grow whose bigger job starts on idle nodes: nothing is asked of the
  training until that job waits for it.
- STOPPING: every rank is asked to checkpoint and stop.
- ENDED: the job goes on elsewhere, or will not; the watcher is done.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from slurmpre.job.watch.notice import Notice
from slurmpre.tier.in_place import InPlacePull


class Phase(Enum):
    QUIET = "quiet"
    GROWING = "growing"
    GOING_ON = "going on"
    STOPPING = "stopping"
    ENDED = "ended"

    @property
    def trains_on(self) -> bool:
        """After a notice, and the notice file does not (yet) say stop."""
        return self in (Phase.GROWING, Phase.GOING_ON)


@dataclass(frozen=True)
class Clock:
    """The watcher's time: ``monotonic`` for every wait and deadline, ``wall`` only for
    Slurm's stamps and the ledger's records. A test passes one clock that drives both."""

    monotonic: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time


@dataclass(frozen=True)
class Commit:
    """The checkpoint that answers the notice, as the watcher saw it committed."""

    step: int | None
    path: str
    at: float  # monotonic: when the watcher saw it
    on_node: bool  # a save on the nodes (the tier): their wrappers serve it still


@dataclass
class Progress:
    """What the watcher knows from the first notice on, beside its phase."""

    notice: Notice | None = None
    phase: Phase = Phase.QUIET
    deadline: float | None = None  # the job must have gone on by then
    asked_at: float | None = None  # the notice file first written
    told_at: float | None = None  # the notice file first said stop
    stop_at: float | None = None  # a script that goes on must be told to stop by then
    step_at_notice: int | None = None
    commit: Commit | None = None
    exit_code: int | None = None
    drained: set[str] = field(default_factory=set)
    listened_before: bool = False  # an earlier attempt's script asked preemption_requested()
    went_on: bool = False  # the script trains on after a notice checkpoint, until told to stop
    early: bool = False  # the next step starts beside this one (`overlap`)
    pull: InPlacePull | None = None  # in place: the kept nodes pull the notice save
