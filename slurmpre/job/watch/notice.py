"""A preemption notice: where it comes from (a drain, the time-limit warning), and the
file that carries it from node 0 to every rank (`slurmpre.preemption_requested()`).

``stop`` true: checkpoint and stop. ``stop`` false (a successor, or the next step, is
on its way): a script that asks `checkpoint_requested()` checkpoints and trains on
until the watcher rewrites the file with ``stop`` true; one that only asks
`preemption_requested()` stops at either level.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

from slurmpre.folder import trust
from slurmpre.folder.access import CONTROL_MODE
from slurmpre.folder.records import describe_notice
from slurmpre.reading import SMALL
from slurmpre.signals import Latch
from slurmpre.slurm.parse import NodeInfo


@dataclass(frozen=True)
class Notice:
    kind: str  # "drain" or "time-limit"
    node: str | None
    reason: str | None
    seen_at: float  # wall-clock seconds: when slurmpre saw it
    at: float | None = None  # wall-clock seconds: when it happened, as Slurm stamped it
    stop: bool = True  # False: a script that can go on after its checkpoint keeps training
    grow_to: int | None = None  # a grow (`grow`): the bigger successor's node count
    at_once: bool = False  # ... which starts on idle nodes while this job trains

    @property
    def since(self) -> float:
        """When the window started: Slurm's own time where it gave one, else when seen."""
        return self.seen_at if self.at is None else min(self.at, self.seen_at)

    @property
    def anchored_on(self) -> str:
        return "seen" if self.at is None else "slurm"

    def describe(self) -> str:
        return describe_notice(self.kind, self.node, self.reason)


class NoticeSource(Protocol):
    """Something that can tell that the job is about to lose its nodes. A source that
    subclasses it takes the defaults: asked at the watcher's interval, nothing to close,
    nothing to undo when its notice is refused."""

    name: str
    every: float | None = None  # seconds between asks; None: the watcher's interval

    def poll(self) -> list[Notice]:
        """Every notice it sees now (empty when all is well); SlurmpreError when it cannot tell."""
        ...

    def refused(self) -> None:
        """Its notice was not acted on (a grow the cluster refused): it may come again."""
        return None

    def close(self) -> None:
        """The watcher ends: let go of what the source holds, say what it cost."""
        return None


class NodeView(Protocol):
    """What answers for nodes' states: Slurm itself, or the user's shared drain board
    (`slurmpre.job.watch.drainboard`)."""

    def nodes(self, names: Sequence[str] = ()) -> list[NodeInfo]: ...


class DrainSource(NoticeSource):
    """The provider's notice: a node of the job drained (one query for all nodes).
    ``every``: ask this often instead of at the watcher's interval (a shared board is
    read every second; it asks Slurm at most once per interval itself)."""

    name = "drain"

    def __init__(
        self,
        client: NodeView,
        nodes: Sequence[str],
        reason: re.Pattern[str] | None = None,
        wall: Callable[[], float] = time.time,
        every: float | None = None,
        close: Callable[[], None] = lambda: None,
    ) -> None:
        self.client = client
        self.nodes = tuple(nodes)
        self.reason = reason
        self.wall = wall
        self.queries = 0
        self.every = every
        self._close = close

    def close(self) -> None:
        self._close()

    def poll(self) -> list[Notice]:
        self.queries += 1
        found = []
        for node in self.client.nodes(self.nodes):
            if node.name not in self.nodes or not node.draining:
                continue
            if self.reason is not None and not self.reason.search(node.reason or ""):
                continue
            found.append(Notice("drain", node.name, node.reason, self.wall(), node.reason_time))
        return found


class SignalSource(NoticeSource):
    """The time-limit warning: Slurm's ``--signal`` reaches the wrapper; a latch keeps its time."""

    name = "time-limit"

    def __init__(self, latch: Latch) -> None:
        self.latch = latch

    def poll(self) -> list[Notice]:
        at = self.latch.at
        if at is None:
            return []
        return [Notice("time-limit", None, "time limit warning from Slurm (--signal)", at, at)]


def write_notice(path: Path, notice: Notice) -> None:
    """The notice for every rank: the user's own file, never anyone else's to write."""
    trust.write(path, json.dumps(asdict(notice), sort_keys=True), mode=CONTROL_MODE)


NO_NOTICE, CHECKPOINT, STOP = 0, 1, 2
"""A notice's levels, as ranks agree on them: none; checkpoint (and a script that can,
goes on); checkpoint and stop."""


def notice_level(path: str) -> int:
    """The level of the notice file at ``path``: a file that is not a notice of
    ``stop`` false (an old notice, or one being replaced) means stop."""
    if not path:
        return NO_NOTICE
    try:
        data = json.loads(trust.read_text(Path(path), SMALL))
    except FileNotFoundError:
        return NO_NOTICE
    except trust.Untrusted as exc:
        # Someone else's file where the watcher's notice goes: not a notice. The job
        # trains on; its watcher still acts on the drain it sees (a requeue, at worst).
        trust.refused(exc)
        return NO_NOTICE
    except (OSError, ValueError):
        return STOP
    return CHECKPOINT if isinstance(data, dict) and data.get("stop") is False else STOP


def read_notice(path: Path) -> Notice | None:
    try:
        return Notice(**json.loads(trust.read_text(path, SMALL)))
    except trust.Untrusted as exc:
        trust.refused(exc)
        return None
    except (OSError, ValueError, TypeError):  # UnicodeDecodeError is a ValueError
        return None


# Once all ranks know of a notice, the stop follows within seconds (the successor is up, or
# the deadline nears), and each second until the ranks agree on it the successor waits:
# look and agree this often then (a stat and one small all_reduce: next to nothing).
HURRY = 0.2
Agree = Callable[[int, int], tuple[int, int]]
"""(local flag, proposed calls between syncs) -> (max flag over ranks, min proposal)."""


@dataclass
class Syncs:
    """The schedule of one process's syncs: the calls so far, the call of the next sync,
    and the last sync's time, its call, and the calls since the one before."""

    calls: int = 0
    next: int = 1
    at: float | None = None
    at_call: int = 0
    every: int = 1


class NoticeGate:
    """One process's view of the notice, and the schedule on which all ranks agree on it.

    The local check is one stat of the shared notice file (and a read of it, once it
    exists, until it says stop), at most every ``check_every`` seconds. Agreement is a
    collective, so it is amortised: all ranks sync on the same call numbers, and at
    each sync they also agree on how many calls to the next one (about
    ``sync_period`` seconds of steps, at most ``max_every`` calls). Ranks therefore
    reach each level on the same call, with at most about ``sync_period`` seconds of
    delay after the watcher wrote it; once they agree on a notice, about ``HURRY``.
    """

    sync_period = 1.0
    max_every = 100

    def __init__(
        self,
        path: Callable[[], str],
        *,
        clock: Callable[[], float] = time.monotonic,
        level: Callable[[str], int] = notice_level,
        check_every: float = 1.0,
    ) -> None:
        self.path = path
        self.clock = clock
        self.read_level = level
        self.check_every = check_every
        self.seen = NO_NOTICE  # the level this process saw in the file
        self.level = NO_NOTICE  # the level all ranks agreed on
        self.checked_at = float("-inf")
        self.syncs = Syncs()
        # What the script has asked so far (the same on every rank), for slurmpre.api:
        self.marked: set[str] = set()  # the marks it left (listening, goes on, taken)
        self.goes_on = False  # it asks checkpoint_requested(): it can save and go on
        self.stop_asked = False  # it asks preemption_requested()
        self.checkpoint_answered = False

    @property
    def agreed(self) -> bool:
        """All ranks know of a notice (of either level)."""
        return self.level >= CHECKPOINT

    def _local(self, now: float) -> int:
        if self.seen < STOP and now - self.checked_at >= self._soon(self.check_every):
            self.checked_at = now
            target = self.path()
            self.seen = max(self.seen, self.read_level(target) if target else NO_NOTICE)
        return self.seen

    def _soon(self, period: float) -> float:
        return min(period, HURRY) if self.agreed else period

    def _proposal(self, now: float) -> int:
        """Calls to the next sync: about ``sync_period`` seconds at the rate of calls
        since the last sync, at most twice as many as last time (a script may ask
        twice in a step, so two calls in a row say little of a step's length)."""
        syncs = self.syncs
        if syncs.at is None:
            return 1
        per_call = (now - syncs.at) / max(syncs.calls - syncs.at_call, 1)
        calls = math.ceil(self._soon(self.sync_period) / max(per_call, 1e-6))
        return max(1, min(self.max_every, 2 * syncs.every, calls))

    def __call__(self, agree: Agree | None) -> bool:
        """True once all ranks know of a notice, of either level."""
        return self.agree(agree) >= CHECKPOINT

    def agree(self, agree: Agree | None) -> int:
        """The level all ranks have agreed on by this call (it never goes down)."""
        if self.level >= STOP:
            return self.level
        now = self.clock()
        local = self._local(now)
        if agree is None:
            self.level = max(self.level, local)
            return self.level
        syncs = self.syncs
        syncs.calls += 1
        if syncs.calls < syncs.next:
            return self.level
        flag, every = agree(local, self._proposal(now))
        syncs.every = max(1, every)
        syncs.next = syncs.calls + syncs.every
        syncs.at, syncs.at_call = now, syncs.calls
        self.level = max(self.level, flag)
        return self.level
