"""The ledger's records: one frozen type per event, the only thing the job side tells the
login side (``<checkpoint_dir>/.slurmpre/attempts.jsonl``).

Each record reads and writes its own JSON (``to_json``/``from_json``) with the keys the
ledger has always had, so a ledger written before these types reads the same, and one
written now reads the same to an older slurmpre. What a record holds is said once, by
its fields' annotations: ``from_json`` checks every known key against them (a record of
the wrong shape is refused, and the ledger skips it with a warning), and keeps keys it
does not know (a later version's) so that they are written back unchanged.

The job side imports this module: it imports nothing but the standard library.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from slurmpre.folder.layout import attempt_key
from slurmpre.folder.record_shape import ShapeError, field_checks, short

_R = TypeVar("_R", bound="Record")


@dataclass(frozen=True)
class AttemptId:
    """One run of the job's training: Slurm's restart count, and how many in-place
    restarts inside that allocation came before it."""

    restart: int
    in_place: int = 0

    @property
    def key(self) -> str:
        """Its name in files and in the logs: ``3``, or ``3.1`` after one in-place restart."""
        return attempt_key(self.restart, self.in_place)

    def __str__(self) -> str:
        return self.key


def describe_notice(kind: str, node: str | None, reason: str | None) -> str:
    """``drain of NODE (reason)``, or ``time-limit``: a notice in the logs and in `status`."""
    where = f" of {node}" if node else ""
    why = f" ({reason})" if reason else ""
    return f"{kind}{where}{why}"


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class Record:
    """What every record holds. ``time`` is when the ledger appended it (None before)."""

    EVENT: ClassVar[str] = ""
    job: str
    time: float | None = None
    # Keys a later slurmpre wrote that this one does not know: kept, written back as read.
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # For a record read from a ledger: the keys its line had, so that one written by an
    # earlier version (a first notice without today's plan keys) is written back as read.
    read_keys: frozenset[str] | None = field(default=None, compare=False, repr=False)

    # Keys written only when their value is not None (the rest are always written).
    _OPTIONAL: ClassVar[frozenset[str]] = frozenset({"time"})

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.extra)
        out["event"] = self.EVENT
        omitted = self._omitted()
        for f in dataclasses.fields(self):
            if f.name in ("extra", "read_keys"):
                continue
            value = getattr(self, f.name)
            if value is None and f.name in omitted and not self._was_read(f.name):
                continue
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    def _was_read(self, key: str) -> bool:
        return self.read_keys is not None and key in self.read_keys

    def _omitted(self) -> frozenset[str]:
        """The keys left out of the JSON when None (for a record read from a ledger: when
        its line did not have them)."""
        return self._OPTIONAL

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> Record:
        """The record ``data`` holds; a ShapeError naming what is wrong."""
        if not isinstance(data, Mapping):
            raise ShapeError("not a JSON object")
        event = data.get("event")
        if not isinstance(event, str):
            raise ShapeError(f"event = {short(event)} is not an event name")
        cls = EVENTS.get(event, Other)
        return cls._read(data)

    @classmethod
    def _read(cls: type[_R], data: Mapping[str, Any]) -> _R:
        known: dict[str, Any] = {}
        checks = field_checks(cls)
        for name, (check, required) in checks.items():
            if name not in data:
                if required:
                    raise ShapeError(f"no {name!r}")
                continue
            value = data[name]
            if not check(value):
                raise ShapeError(f"{name} = {short(value)} has the wrong type")
            known[name] = tuple(value) if isinstance(value, list) else value
        extra = {k: v for k, v in data.items() if k not in checks and k != "event"}
        if cls is Other:
            extra["event"] = data["event"]
        if known.get("time") is None:
            raise ShapeError("no 'time'")
        return cls(**known, extra=extra, read_keys=frozenset(data))

    def stamped(self: _R, time: float) -> _R:
        """This record as appended at ``time``."""
        return dataclasses.replace(self, time=time)

    def _values(self) -> tuple[Any, ...]:
        return tuple(
            getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in ("extra", "read_keys")
        )

    # One __eq__, __hash__ and __repr__ for every record type, written once (every record
    # class says eq=False, repr=False): generated per class they would cost about half a
    # millisecond each at import, on the wrapper's way to the training.
    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self._values() == other._values()

    def __hash__(self) -> int:
        return hash((type(self), self._values()))

    def __repr__(self) -> str:
        fields = ", ".join(
            f"{f.name}={getattr(self, f.name)!r}"
            for f in dataclasses.fields(self)
            if f.name not in ("extra", "read_keys")
        )
        return f"{type(self).__name__}({fields})"


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class Other(Record):
    """An event this slurmpre does not know (a later version's): read past, written back."""

    EVENT: ClassVar[str] = ""

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        out["event"] = self.extra["event"]
        return out


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class Submitted(Record):
    """`slurmpre submit` queued the job (written on the login node)."""

    EVENT: ClassVar[str] = "submitted"
    name: str
    code: str | None = None  # the code's identity at submit (`slurmpre.login.code`)
    array: str | None = None  # an array job's range of tasks ("0-2")
    # A sweep's tasks, as its overrides name each one ("env.LR=0.1 env.SEED=1"), in order.
    tasks: tuple[str, ...] | None = None

    _OPTIONAL: ClassVar[frozenset[str]] = frozenset({"time", "code", "array", "tasks"})


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class AttemptRecord(Record):
    """A record of one attempt of the job (written inside the job)."""

    attempt: int  # Slurm's restart count
    in_place: int = 0  # in-place restarts before this step of the attempt

    @property
    def attempt_id(self) -> AttemptId:
        return AttemptId(self.attempt, self.in_place)

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        if not self.in_place and not self._was_read("in_place"):
            del out["in_place"]  # records of a job that never restarted in place read as ever
        return out


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class Start(AttemptRecord):
    """Node 0 chose the checkpoint to resume from; the attempt starts on these nodes."""

    EVENT: ClassVar[str] = "start"
    nodes: tuple[str, ...]
    num_nodes: int | None = None
    world_size: int | None = None
    resume_from: str | None = None
    step: int | None = None
    code: str | None = None  # the code it runs, as the script says (SLURMPRE_CODE)

    _OPTIONAL: ClassVar[frozenset[str]] = frozenset({"time", "code"})


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class Notice(AttemptRecord):
    """The watcher saw a drain or the time-limit warning. The first notice of an attempt
    also says what the watcher will do and by when (the keys after ``first``)."""

    EVENT: ClassVar[str] = "notice"
    kind: str  # "drain" or "time-limit"
    node: str | None
    reason: str | None
    seen_at: float
    first: bool
    step_at_notice: int | None = None
    drained_at: float | None = None
    deadline_from: str | None = None
    deadline_at: float | None = None
    restart: str | None = None  # "in_place" or "requeue"
    restart_why: str | None = None
    requeue_floor_s: float | None = None
    expected_wait_s: dict[str, Any] | None = None

    _FIRST_ONLY: ClassVar[frozenset[str]] = frozenset(
        {
            "step_at_notice",
            "drained_at",
            "deadline_from",
            "deadline_at",
            "restart",
            "restart_why",
            "requeue_floor_s",
            "expected_wait_s",
        }
    )

    def _omitted(self) -> frozenset[str]:
        # The first notice writes its plan whole, nulls included; a repeated one has none.
        if self.first and self.read_keys is None:
            return self._OPTIONAL
        return self._OPTIONAL | self._FIRST_ONLY

    def describe(self) -> str:
        return describe_notice(self.kind, self.node, self.reason)


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class Checkpoint(AttemptRecord):
    """``slurmpre.checkpoint()`` committed a checkpoint (rank 0)."""

    EVENT: ClassVar[str] = "checkpoint"
    step: int
    path: str
    after_notice: bool
    seconds: float | None = None  # writing and committing it; unknown for another's save

    _OPTIONAL: ClassVar[frozenset[str]] = frozenset({"time", "seconds"})


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class Committed(AttemptRecord):
    """The watcher saw the checkpoint that answers the notice."""

    EVENT: ClassVar[str] = "committed"
    step: int | None
    path: str
    committed_seen_at: float


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class Requeued(AttemptRecord):
    EVENT: ClassVar[str] = "requeued"
    why: str | None
    requeued_at: float


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class RequeueSkipped(AttemptRecord):
    EVENT: ClassVar[str] = "requeue_skipped"
    why: str | None


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class InPlaceRequested(AttemptRecord):
    """The watcher asked the batch script's supervisor to go on without ``release``."""

    EVENT: ClassVar[str] = "in_place_requested"
    keep: tuple[str, ...]
    release: tuple[str, ...]
    why: str | None
    requested_at: float


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class InPlace(AttemptRecord):
    """The supervisor released the nodes; the next step runs on ``kept``."""

    EVENT: ClassVar[str] = "in_place"
    kept: tuple[str, ...]
    released: tuple[str, ...]
    release_s: float
    requested_at: float
    released_at: float
    why: str | None


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class Successor(AttemptRecord):
    """The watcher submitted a new job to take over from this one (instead of a requeue),
    after making this one not requeueable."""

    EVENT: ClassVar[str] = "successor"
    successor: str  # the new job's id
    excluded: tuple[str, ...]  # the draining nodes it may not start on
    why: str | None
    submitted_at: float


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class Waiting(AttemptRecord):
    """A successor's training has started up and waits in `slurmpre.resume_path()` for
    ``predecessor`` to commit its last checkpoint and end (rank 0 writes it)."""

    EVENT: ClassVar[str] = "waiting"
    predecessor: str
    waiting_at: float


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class Stopping(AttemptRecord):
    """The watcher told a script that went on training after its notice checkpoint to
    take its last checkpoint and stop: its successor waits, or the deadline nears."""

    EVENT: ClassVar[str] = "stopping"
    why: str
    asked_at: float


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class InPlaceFailed(AttemptRecord):
    EVENT: ClassVar[str] = "in_place_failed"
    why: str | None


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class GaveUp(AttemptRecord):
    """The run stops restarting (`slurmpre.job.start.limits`): this attempt did not train."""

    EVENT: ClassVar[str] = "gave_up"
    why: str


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class Placed(AttemptRecord):
    """Where the run's next job trains (`slurmpre.placement.policy`): preemptible or
    standard nodes, why, and the facts the decision was made on."""

    EVENT: ClassVar[str] = "placed"
    where: str  # "preemptible" or "standard"
    why: str
    decided_at: float
    steps_done: int | None = None
    total_steps: int | None = None
    deadline_at: float | None = None
    slack_s: float | None = None
    line_step: float | None = None
    rate: float | None = None  # steps per second, measured from the ledger
    preemptions: int = 0
    # Waiting on preemptible nodes may not wait for ever: a twin on standard nodes,
    # queued to start no earlier than ``twin_from``; whichever starts first takes over.
    twin: str | None = None
    twin_from: float | None = None


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class Claimed(AttemptRecord):
    """A successor took over from ``predecessor``: of the jobs that predecessor submitted
    for one hand-over (a successor and its twin), the first to claim trains."""

    EVENT: ClassVar[str] = "claimed"
    predecessor: str


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class End(AttemptRecord):
    """The training of the attempt (or step) exited."""

    EVENT: ClassVar[str] = "end"
    exit_code: int | None
    seconds: float


EVENTS: dict[str, type[Record]] = {
    cls.EVENT: cls
    for cls in (
        Submitted,
        Start,
        Notice,
        Checkpoint,
        Committed,
        Requeued,
        RequeueSkipped,
        Successor,
        Waiting,
        Stopping,
        InPlaceRequested,
        InPlace,
        InPlaceFailed,
        GaveUp,
        Placed,
        Claimed,
        End,
    )
}
