"""The values of the spec keys that bound a run in time and money (`deadline`,
`max_wait`, `max_cost`): each checked, or a `SpecError` naming the key and the value."""

from __future__ import annotations

import re

from slurmpre import keys
from slurmpre.errors import SpecError, UsageError
from slurmpre.login.values import bad, one_line, seconds
from slurmpre.placement import deadline as placement_deadline


def deadline(key: str, value: object) -> str:
    """A deadline as `slurmpre.placement.deadline` reads it (whether it is past is judged
    at submit, against the run's first submission)."""
    text = one_line(key, value).strip()
    try:
        placement_deadline.parse(text, first_submit=0.0, key=key)
    except UsageError as exc:
        raise SpecError(str(exc)) from None
    return text


def duration(key: str, value: object) -> float:
    """Seconds: a number, or a duration such as ``"30m"``, ``"2h"``, ``"1d"`` (an error
    names the value as written)."""
    if isinstance(value, str) and not re.fullmatch(r"\s*[\d.]+\s*", value):
        found = placement_deadline.duration(value)
        if found is None:
            raise bad(key, value, "must be seconds or a duration such as 30m, 2h or 1d")
        why = keys.in_range(key, found)
        if why is not None:
            raise bad(key, value, f"{why} seconds")
        return found
    return seconds(key, value)


def money(key: str, value: object) -> float:
    """An amount in the prices' currency (`defaults.ON_DEMAND_PRICE`), within its range."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise bad(key, value, "must be a number (the prices' currency)")
    why = keys.in_range(key, float(value))
    if why is not None:
        raise bad(key, value, why)
    return float(value)
