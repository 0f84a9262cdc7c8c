"""A preemption notice: where it comes from (a drain, the time-limit warning), and the
file that carries it from node 0 to every rank.

Node 0's watcher writes ``<checkpoint_dir>/.slurmpre/notice-<job>-<attempt>.json``
(atomically) when it sees a drain or a time-limit warning; ranks learn of it
through `slurmpre.preemption_requested()`, and each node's wrapper can relay
it to its child as a signal. The script leaves two marks beside it: that it
listens (it asks `preemption_requested()`), and that it took the notice (the
answer was True, so it checkpoints and stops).
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

from slurmpre.atomic import write_atomic
from slurmpre.job.layout import FolderLayout
from slurmpre.job.records import describe_notice
from slurmpre.reading import SMALL, read_text
from slurmpre.signals import Latch
from slurmpre.slurm.client import SlurmClient


@dataclass(frozen=True)
class Notice:
    kind: str  # "drain" or "time-limit"
    node: str | None
    reason: str | None
    seen_at: float  # wall-clock seconds: when slurmpre saw it
    at: float | None = None  # wall-clock seconds: when it happened, as Slurm stamped it

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
    """Something that can tell that the job is about to lose its nodes."""

    name: str

    def poll(self) -> list[Notice]:
        """Every notice it sees now (empty when all is well); SlurmpreError when it cannot tell."""
        ...


class DrainSource:
    """The provider's notice: a node of the job drained (one query for all nodes)."""

    name = "drain"

    def __init__(
        self,
        client: SlurmClient,
        nodes: Sequence[str],
        reason: re.Pattern[str] | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.nodes = tuple(nodes)
        self.reason = reason
        self.wall = wall
        self.queries = 0

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


class SignalSource:
    """The time-limit warning: Slurm's ``--signal`` reaches the wrapper; a latch keeps its time."""

    name = "time-limit"

    def __init__(self, latch: Latch) -> None:
        self.latch = latch

    def poll(self) -> list[Notice]:
        at = self.latch.at
        if at is None:
            return []
        return [Notice("time-limit", None, "time limit warning from Slurm (--signal)", at, at)]


def notice_path(folder: Path, job_tag: str, attempt: str | int) -> Path:
    return FolderLayout(folder).notice(job_tag, attempt)


def listening_path(folder: Path, job_tag: str, attempt: str | int) -> Path:
    """Exists once the training script has asked `preemption_requested()` in this attempt."""
    return FolderLayout(folder).listening(job_tag, attempt)


def taken_path(folder: Path, job_tag: str, attempt: str | int) -> Path:
    """Exists once `preemption_requested()` has answered True: the script stops on the notice."""
    return FolderLayout(folder).taken(job_tag, attempt)


def write_notice(path: Path, notice: Notice, *, mode: int = 0o600) -> None:
    write_atomic(path, json.dumps(asdict(notice), sort_keys=True), mode=mode)


def read_notice(path: Path) -> Notice | None:
    try:
        return Notice(**json.loads(read_text(path, SMALL)))
    except (OSError, ValueError, TypeError):  # UnicodeDecodeError is a ValueError
        return None


Agree = Callable[[int, int], tuple[int, int]]
"""(local flag, proposed calls between syncs) -> (max flag over ranks, min proposal)."""


class NoticeGate:
    """One process's view of the notice, and the schedule on which all ranks agree on it.

    The local check is one stat of the shared notice file, at most every
    ``check_every`` seconds. Agreement is a collective, so it is amortised: all
    ranks sync on the same call numbers, and at each sync they also agree on
    how many calls to the next one (about ``sync_period`` seconds of steps, at
    most ``max_every`` calls). Ranks therefore turn True on the same call, with
    at most about ``sync_period`` seconds of delay after the notice.
    """

    def __init__(
        self,
        path: Callable[[], str],
        *,
        clock: Callable[[], float] = time.monotonic,
        exists: Callable[[str], bool] = os.path.exists,
        check_every: float = 1.0,
        sync_period: float = 1.0,
        max_every: int = 100,
    ) -> None:
        self.path = path
        self.clock = clock
        self.exists = exists
        self.check_every = check_every
        self.sync_period = sync_period
        self.max_every = max_every
        self.seen_locally = False
        self.agreed = False
        self.checked_at = float("-inf")
        self.calls = 0
        self.next_sync = 1
        self.last_call: float | None = None
        self.step_seconds: float | None = None
        self.listening_said = False

    def _local(self, now: float) -> bool:
        if not self.seen_locally and now - self.checked_at >= self.check_every:
            self.checked_at = now
            target = self.path()
            self.seen_locally = bool(target) and self.exists(target)
        return self.seen_locally

    def _proposal(self) -> int:
        if self.step_seconds is None:
            return 1
        calls = math.ceil(self.sync_period / max(self.step_seconds, 1e-6))
        return max(1, min(self.max_every, calls))

    def __call__(self, agree: Agree | None) -> bool:
        if self.agreed:
            return True
        now = self.clock()
        if self.last_call is not None:
            dt = now - self.last_call
            self.step_seconds = (
                dt if self.step_seconds is None else 0.8 * self.step_seconds + 0.2 * dt
            )
        self.last_call = now
        local = self._local(now)
        if agree is None:
            self.agreed = local
            return local
        self.calls += 1
        if self.calls < self.next_sync:
            return False
        flag, every = agree(int(local), self._proposal())
        self.next_sync = self.calls + max(1, every)
        self.agreed = bool(flag)
        return self.agreed
