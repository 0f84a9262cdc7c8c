"""A run's deadline, as the spec gives it (docs/spec.md, ``deadline``): an ISO 8601 moment,
or a duration from the ledger's first ``Submitted``, so a successor, a requeue and a
resubmit all mean the same moment.
"""

from __future__ import annotations

import datetime as dt
import math
import re

from slurmpre.errors import UsageError
from slurmpre.keys.key import as_written

_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
LONGEST = 366 * 86400.0  # a deadline further than a year away is a typo


def duration(text: str) -> float | None:
    """Seconds in ``"90m"``, ``"8h"``, ``"1d12h"``; None when ``text`` is not one."""
    text = text.strip().lower()
    if not text or _PART.sub("", text):
        return None
    return sum(float(n) * _UNIT[u] for n, u in _PART.findall(text))


def is_duration(text: str) -> bool:
    return duration(text) is not None


def parse(text: str, *, first_submit: float | None, key: str = "deadline") -> float:
    """The deadline as a Unix time. A duration needs ``first_submit`` (the run's first
    submission; None: now is the first)."""
    if not isinstance(text, str) or not text.strip():
        raise UsageError(
            f"{key} = {as_written(text)}: give a time (2026-12-10T18:00) or a duration (8h)"
        )
    seconds = duration(text)
    if seconds is not None:
        if not 0 < seconds <= LONGEST:
            raise UsageError(f"{key} = {as_written(text)}: a duration from 1 s to 366 days")
        origin = first_submit if first_submit is not None else dt.datetime.now().timestamp()
        return origin + seconds
    try:
        moment = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"{key} = {as_written(text)}: not an ISO 8601 time (2026-12-10T18:00, with an offset "
            "if not local) nor a duration (90m, 8h, 2d)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # the login node's local time
    value = moment.timestamp()
    if not math.isfinite(value):
        raise UsageError(f"{key} = {as_written(text)}: not a time")
    return value


def pinned(text: str) -> str:
    """A moment without an offset pinned in this machine's zone, the login node's at
    submit (``"2026-12-10T18:00"`` -> ``"2026-12-10T18:00:00+01:00"``), so the nodes,
    whatever their zone, read the same instant; a duration, or a moment with an offset,
    as it is."""
    if duration(text) is not None:
        return text
    try:
        moment = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return text  # refused where it is parsed
    if moment.tzinfo is not None:
        return text
    return moment.astimezone().isoformat()


def stamp(when: float) -> str:
    """A Unix time in this machine's zone, with its offset: ``2026-12-10T18:00+01:00``."""
    return dt.datetime.fromtimestamp(when).astimezone().isoformat(timespec="minutes")


def check(text: str, *, now: float, key: str = "deadline") -> None:
    """A spec's deadline, refused at submit when it cannot mean anything: unreadable,
    already past (a moment), or too far."""
    when = parse(text, first_submit=now, key=key)
    if when <= now:
        raise UsageError(
            f"{key} = {as_written(text)}: {stamp(when)} is already past (it is now {stamp(now)})"
        )
    if when - now > LONGEST:
        raise UsageError(f"{key} = {as_written(text)}: more than 366 days away")
