"""One user's jobs on one cluster share one poll of their nodes' drains (the model and
the figures: docs/spec.md, "A user's jobs share their drain polls", and docs/load.md).

Each job *registers* its nodes (``jobs/<job>.json``; ``"all": true`` for a job that
may grow, and the holder then asks about every node); the holder of the *lease*
(``lease.json``, taken under a lock, renewed at each poll, for three intervals; a
holder that misses its poll by more than a read and a second hands it on at once)
writes the *board* (``board.json``). What is read there must be a regular, owner-only
file of this user, small and of the right shape, else it is ignored and the job asks
Slurm itself.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import stat
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

from slurmpre import environment
from slurmpre.atomic import write_atomic
from slurmpre.folder.access import OWNER, make_dirs
from slurmpre.folder.locks import FolderLock, LockTimeout
from slurmpre.job.watch.board_file import (
    BOARD_MAX_BYTES,
    VERSION,
    Board,
    board_json,
    board_of,
    number,
    read_owned,
)
from slurmpre.slurm.client import SlurmClient
from slurmpre.slurm.parse import NodeInfo

LOG = logging.getLogger(__name__)

GRACE = 1.0  # seconds a board may be older than its reader's interval, and still serve
READ_EVERY = 1.0  # seconds between a job's looks at the board
LEASE_INTERVALS = 3  # a lease lasts this many of its holder's intervals
REGISTRATION_MAX_AGE = 3600.0  # a registration not renewed this long is of a dead job
RENEW_REGISTRATION = 600.0  # seconds between a live job's renewals of it
RESCAN = 60.0  # the holder reads the registrations again at least this often
# Stamps come from other nodes' clocks: one further ahead of this node's than this is
# not fresh (it would stay fresh for as long as it is ahead), it is stale.
MAX_SKEW = 5.0


def folder(env: Mapping[str, str]) -> Path | None:
    """Where this user's jobs on this cluster share their board; None: sharing is off."""
    if env.get(environment.SHARED_WATCH, "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    given = env.get(environment.SHARED_DIR)
    if given:
        return Path(given)
    home = env.get("HOME") or str(Path.home())
    base = env.get("XDG_STATE_HOME") or f"{home}/.local/state"
    cluster = env.get("SLURM_CLUSTER_NAME") or "cluster"
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in cluster) or "cluster"
    return Path(base) / "slurmpre" / "watch" / safe


T = TypeVar("T")


@dataclass
class Tally:
    """What sharing did for one job: its own Slurm queries (as holder or alone), and
    the answers it took from another job's poll."""

    queries: int = 0
    shared_answers: int = 0


@dataclass
class _Registration:
    """This job's own entry in the board's folder."""

    everything: bool  # it asks about every node (it may grow)
    at: float = 0.0  # wall clock: last written
    broken: str | None = None  # why the folder cannot be shared: the job asks Slurm itself


@dataclass
class _Cached(Generic[T]):
    """What was last read from a file or folder, and its stamp then: read again when the
    stamp changes."""

    value: T
    stamp: Hashable = None


@dataclass
class _Own:
    """This job's own query of Slurm: its last answer, and when it may ask again."""

    answer: list[NodeInfo] = field(default_factory=list)
    due: float = 0.0


class DrainBoard:
    """The shared view of drains for one job: `nodes(names)` answers as
    `SlurmClient.nodes` does, from the board when it may, else from Slurm."""

    def __init__(
        self,
        where: Path,
        me: str,
        client: SlurmClient,
        interval: float,
        *,
        jitter: float = 0.1,
        wall: Callable[[], float] = time.time,
        everything: bool = False,
    ) -> None:
        """``everything``: this job may grow, and asks about every node."""
        self.dir = where
        self.me = me
        self.client = client
        self.interval = interval
        self.jitter = jitter
        self.wall = wall
        self.rng = random.Random()
        self.tally = Tally()
        self.holding = False
        self._mine = _Registration(everything)
        self._board: _Cached[Board | None] = _Cached(None)
        # every registered job's nodes, and whether one of them asks about every node
        self._registered_jobs: _Cached[tuple[set[str], bool]] = _Cached((set(), False))
        self._own = _Own()

    # -- the files ---------------------------------------------------------------------
    @property
    def lease_path(self) -> Path:
        return self.dir / "lease.json"

    @property
    def board_path(self) -> Path:
        return self.dir / "board.json"

    @property
    def jobs_dir(self) -> Path:
        return self.dir / "jobs"

    def _registration(self) -> Path:
        return self.jobs_dir / f"{self.me}.json"

    def register(self, nodes: Sequence[str]) -> bool:
        """Add this job's nodes to what the holder asks about; False (and a line said)
        when the folder cannot be shared safely: the job then asks Slurm itself."""
        try:
            make_dirs(self.jobs_dir, OWNER)
            for d in (self.dir, self.jobs_dir):
                st = os.lstat(d)
                if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
                    raise ValueError(f"{d} is not an owner-only folder of this user")
            data = {"v": VERSION, "job": self.me, "nodes": sorted(nodes), "at": self.wall()}
            if self._mine.everything:
                data["all"] = True
            write_atomic(self._registration(), json.dumps(data), mode=OWNER.file_mode)
        except (OSError, ValueError) as exc:
            self._mine.broken = str(exc)
            LOG.info(f"drain board {self.dir}: not shared ({exc}); this job asks Slurm itself")
            return False
        self._mine.at = self.wall()
        return True

    @property
    def broken(self) -> bool:
        """The folder could not be shared safely: this job asks Slurm itself."""
        return self._mine.broken is not None

    def close(self) -> None:
        """The job ends: its registration goes, and its lease, if it holds it; what it
        cost Slurm is said."""
        with contextlib.suppress(OSError):
            self._registration().unlink()
        if self.holding:
            with contextlib.suppress(OSError, LockTimeout), self._lock(0):
                lease = self._read_lease()
                if lease is not None and lease[0] == self.me:
                    self.lease_path.unlink()
            self.holding = False
        LOG.info(
            f"drain board: {self.tally.queries} Slurm queries by this job, "
            f"{self.tally.shared_answers} answers read from the board, "
            f"{self.client.throttled} times told to back off by Slurm's rate limit"
        )

    def _lock(self, timeout: float) -> FolderLock:
        return FolderLock(self.dir / "lease.lock", timeout=timeout, mode=OWNER.file_mode)

    def _read_lease(self) -> tuple[str, float, float | None] | None:
        """(holder, until, the latest moment its holder must renew it by) or None."""
        try:
            d = read_owned(self.lease_path)
        except (OSError, ValueError):
            return None  # none, unreadable or foreign: as if lapsed, replaced under the lock
        ok = isinstance(d, dict) and isinstance(d.get("holder"), str)
        until = d.get("until") if ok else None
        if not ok or not number(until):
            return None
        at, every = d.get("at"), d.get("interval")
        due = None
        if number(at) and number(every):
            if at > self.wall() + MAX_SKEW or every > LEASE_INTERVALS * 3600:
                return None  # renewed "in the future": a clock far ahead, as if lapsed
            due = float(at) + float(every) + GRACE + READ_EVERY
        elif float(until) > self.wall() + LEASE_INTERVALS * self.interval + MAX_SKEW:
            return None  # held for longer than any lease is taken for: as if lapsed
        return d["holder"], float(until), due

    def _held_by_another(self, now: float) -> bool:
        """Another job holds the lease and keeps it: not lapsed, and renewed on time (its
        holder renews it at every poll, once per its interval; one that missed a poll
        by more than a read and the grace is dead or hung, and hands on at once)."""
        lease = self._read_lease()
        if lease is None or lease[0] == self.me:
            return False
        _, until, due = lease
        return until > now and (due is None or due >= now)

    def _take_lease(self, now: float) -> bool:
        """Hold the lease for LEASE_INTERVALS intervals more, when it is ours, has
        lapsed, or its holder missed its poll (one try at the lock: another job taking
        it now is as good)."""
        if self._held_by_another(now):
            self.holding = False
            return False
        try:
            with self._lock(0):
                if self._held_by_another(now):
                    self.holding = False
                    return False
                until = now + LEASE_INTERVALS * self.interval
                data = json.dumps({"v": VERSION, "holder": self.me, "until": until,
                                   "at": now, "interval": self.interval})  # fmt: skip
                write_atomic(self.lease_path, data, mode=OWNER.file_mode)
        except (LockTimeout, OSError):
            self.holding = False
            return False
        if not self.holding:
            LOG.info(f"drain board: this job polls Slurm for its user's jobs ({self.dir})")
        self.holding = True
        return True

    def _read_board(self) -> Board | None:
        try:
            st = os.lstat(self.board_path)
        except OSError:
            return None
        # Each write is a new file (renamed over the old): its inode tells it apart even
        # when the clock's grain gives two writes one mtime.
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        if key == self._board.stamp:
            return self._board.value
        try:
            board = board_of(read_owned(self.board_path, BOARD_MAX_BYTES))
        except (OSError, ValueError, KeyError, TypeError):
            board = None
        self._board = _Cached(board, key)
        return board

    def _registered(self, now: float) -> set[str]:
        try:
            # Read again when the folder changed, and each minute anyway: two jobs
            # registering within the clock's grain leave one mtime.
            key = (os.lstat(self.jobs_dir).st_mtime_ns, now // RESCAN)
        except OSError:
            return set()
        if key == self._registered_jobs.stamp:
            return self._registered_jobs.value[0]
        nodes: set[str] = set()
        everything = False
        with contextlib.suppress(OSError):
            for entry in os.scandir(self.jobs_dir):
                if not entry.name.endswith(".json") or entry.name.startswith("."):
                    continue
                try:
                    d = read_owned(Path(entry.path))
                    at = float(d["at"])
                    names = d["nodes"]
                except (OSError, ValueError, KeyError, TypeError):
                    continue
                if not -MAX_SKEW <= now - at <= REGISTRATION_MAX_AGE or not isinstance(names, list):
                    continue  # a dead job's, or stamped from the future: never renewed
                nodes.update(n for n in names if isinstance(n, str) and n)
                everything = everything or d.get("all") is True
        self._registered_jobs = _Cached((nodes, everything), key)
        return nodes

    # -- the answer --------------------------------------------------------------------
    def _next(self, now: float) -> float:
        return now + self.interval * (1 + self.rng.uniform(-self.jitter, self.jitter))

    def nodes(self, names: Sequence[str] = ()) -> list[NodeInfo]:
        """``names``' states: from a fresh board naming them all, else from Slurm (this
        job polling for every registered job, as the lease's holder, or for itself)."""
        wanted = set(names)
        if self._mine.broken is not None:
            return self._ask(wanted, now=self.wall())
        now = self.wall()
        if now - self._mine.at > RENEW_REGISTRATION:
            self.register(sorted(wanted))
        board = self._read_board()
        fresh = board is not None and self._fresh(board, now) and wanted <= board.asked
        if self.holding or not fresh:
            # the holder polls once per interval (on the grid of its reads: when the next
            # read would be later); another job, only once the board lags
            due = board is None or not fresh or now - board.polled_at + READ_EVERY > self.interval
            if due and self._take_lease(now):
                return self._poll_for_all(wanted, now)
        if fresh and board is not None:
            self.tally.shared_answers += 1
            return [board.nodes[n] for n in sorted(wanted) if n in board.nodes]
        return self._ask(wanted, now)

    def every_node(self) -> list[NodeInfo]:
        """Every node of the cluster (a job that may grow: `register` with ``everything``),
        from a fresh board that asked about all of them, else as `nodes` asks Slurm."""
        now = self.wall()
        board = self._read_board()
        if not self._fresh_all(board, now) and not self.broken and self._take_lease(now):
            self._poll_for_all(set(), now)  # as the lease's holder: for every job
            board = self._read_board()
        if board is not None and self._fresh_all(board, now):
            self.tally.shared_answers += 1
            return list(board.nodes.values())
        self._ask(set(), now)  # this job's own query of every node, when it is due
        return list(self._own.answer)

    def _fresh(self, board: Board, now: float) -> bool:
        """Polled within this job's interval and the grace (and not from the future)."""
        return -MAX_SKEW <= now - board.polled_at <= self.interval + GRACE

    def _fresh_all(self, board: Board | None, now: float) -> bool:
        return board is not None and self._fresh(board, now) and board.everything

    def _poll_for_all(self, wanted: set[str], now: float) -> list[NodeInfo]:
        every = sorted(self._registered(now) | wanted)
        everything = self._registered_jobs.value[1] or self._mine.everything
        answer = self.client.nodes() if everything else self.client.nodes(every)
        self.tally.queries += 1
        polled_at = self.wall()
        asked = sorted({*every, *(n.name for n in answer)}) if everything else every
        board = Board(polled_at, self.me, frozenset(asked), {n.name: n for n in answer}, everything)
        try:
            write_atomic(self.board_path, board_json(board), mode=OWNER.file_mode)
        except OSError as exc:
            LOG.info(f"drain board: cannot write {self.board_path} ({exc.strerror or exc})")
        self._own.due = self._next(now)
        return [n for n in answer if n.name in wanted]

    def _ask(self, wanted: set[str], now: float) -> list[NodeInfo]:
        """This job's own query, at most once per interval (jittered): of its nodes, or of
        every node when it may grow (one query serves both its looks)."""
        own = self._own
        if now >= own.due:
            asked = () if self._mine.everything else sorted(wanted)  # () asks about every node
            own.answer = self.client.nodes(asked)
            self.tally.queries += 1
            own.due = self._next(now)
        return [n for n in own.answer if n.name in wanted]
