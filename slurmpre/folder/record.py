"""What a ledger record is: how it reads and writes its own JSON, with the keys the ledger
has always had, checked against its fields' annotations (the schema: docs/architecture.md,
"The ledger's records"), and the registry of event types. Import the records through
`slurmpre.folder.records`, which defines (and so registers) every type.

The job side imports this module: it imports nothing but the standard library.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import MISSING, FrozenInstanceError, dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from slurmpre.folder.layout import attempt_key
from slurmpre.folder.record_shape import ShapeError, field_checks, short

# Every event type, by its name in the ledger, in the order the types are defined.
EVENTS: dict[str, type[Record]] = {}
_R = TypeVar("_R", bound="Record")
_T = TypeVar("_T")

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform
else:

    def dataclass_transform(**_kwargs: Any) -> Callable[[_T], _T]:
        return lambda made: made


@dataclass_transform(kw_only_default=True, frozen_default=True, field_specifiers=(field,))
def record_type(cls: type[_T]) -> type[_T]:
    """Make ``cls`` a record type: to mypy (and `dataclasses.fields`, `replace`) a frozen,
    keyword-only dataclass. Python's dataclasses compile an ``__init__``, ``__setattr__``
    and ``__delattr__`` for every class: for the record types, about 14 ms at import on
    the wrapper's way to the training. A record type has none of its own: `Record`'s
    (written once, below) serve every type."""
    return dataclass(init=False, eq=False, repr=False)(cls)


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

    @property
    def step_after(self) -> AttemptId:
        """The next in-place step of the same allocation (one started beside this one too)."""
        return AttemptId(self.restart, self.in_place + 1)

    @property
    def step_before(self) -> AttemptId | None:
        """The in-place step of the same allocation before this one; None for its first."""
        return AttemptId(self.restart, self.in_place - 1) if self.in_place else None

    def __str__(self) -> str:
        return self.key


@functools.cache
def _init_fields(cls: type[Any]) -> tuple[dataclasses.Field[Any], ...]:
    return dataclasses.fields(cls)


def describe_notice(kind: str, node: str | None, reason: str | None) -> str:
    """``drain of NODE (reason)``, or ``time-limit``: a notice in the logs and in `status`."""
    where = f" of {node}" if node else ""
    why = f" ({reason})" if reason else ""
    return f"{kind}{where}{why}"


@record_type
class Record:
    """What every record holds. ``time`` is when the ledger appended it (None before)."""

    def __init_subclass__(cls, *, event: bool = True, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if event:  # its name in the ledger: the class's, in snake_case (PullAsked: pull_asked)
            cls.EVENT = re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower()
            EVENTS[cls.EVENT] = cls

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
        return dataclasses.replace(self, time=time)

    def _values(self) -> tuple[Any, ...]:
        return tuple(
            getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in ("extra", "read_keys")
        )

    if not TYPE_CHECKING:  # to mypy, each type's own keyword-only, frozen dataclass

        def __init__(self, **values: Any) -> None:
            for f in _init_fields(type(self)):
                if f.name in values:
                    value = values.pop(f.name)
                elif f.default is not MISSING:
                    value = f.default
                elif f.default_factory is not MISSING:
                    value = f.default_factory()
                else:
                    raise TypeError(f"{type(self).__name__} needs {f.name!r}")
                object.__setattr__(self, f.name, value)
            if values:
                raise TypeError(f"{type(self).__name__} has no field {next(iter(values))!r}")

        def __setattr__(self, name: str, value: Any) -> None:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")

        def __delattr__(self, name: str) -> None:
            raise FrozenInstanceError(f"cannot delete field {name!r}")

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


@record_type
class Other(Record, event=False):
    """An event this slurmpre does not know (a later version's): read past, written back."""

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        out["event"] = self.extra["event"]
        return out


@record_type
class AttemptRecord(Record, event=False):
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
