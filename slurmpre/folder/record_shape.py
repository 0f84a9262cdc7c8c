"""The shape of a ledger record: what each field's annotation accepts, checked as a
line is read, so that a record of the wrong shape is refused with the key it gets wrong.

Standard library only (the job side reads the ledger).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from typing import Any

from slurmpre.errors import SlurmpreError


class ShapeError(SlurmpreError, ValueError):
    """A JSON object that is not a ledger record; the message says which key is wrong."""


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: object) -> bool:
    return (isinstance(v, int | float) and not isinstance(v, bool)) and math.isfinite(v)


def _is_str(v: object) -> bool:
    return isinstance(v, str)


def _each(check: Callable[[object], bool]) -> Callable[[object], bool]:
    return lambda v: isinstance(v, list | tuple) and all(check(x) for x in v)


_BASE: dict[str, Callable[[object], bool]] = {
    "str": _is_str,
    "int": _is_int,
    "float": _is_number,
    "bool": lambda v: isinstance(v, bool),
    "tuple[str, ...]": _each(_is_str),
    "tuple[int, ...]": _each(_is_int),
    "dict[str, Any]": lambda v: isinstance(v, dict),
}


def _check_for(annotation: str) -> tuple[Callable[[object], bool], bool]:
    """(the check of a value, whether the key is required) for a field's annotation."""
    optional = annotation.endswith(" | None")
    base = _BASE[annotation.removesuffix(" | None")]
    if optional:
        return (lambda v: v is None or base(v)), False
    return base, True


_CHECKS: dict[type[Any], dict[str, tuple[Callable[[object], bool], bool]]] = {}


def field_checks(cls: type[Any]) -> dict[str, tuple[Callable[[object], bool], bool]]:
    """Each field's check, from its annotation; made once per class."""
    found = _CHECKS.get(cls)
    if found is None:
        found = {}
        for f in dataclasses.fields(cls):
            if f.name in ("extra", "read_keys"):
                continue
            check, required = _check_for(str(f.type))
            # A field with a default may be absent (in_place, the first notice's plan).
            has_default = f.default is not dataclasses.MISSING
            found[f.name] = (check, required and not has_default)
        _CHECKS[cls] = found
    return found


def short(value: object) -> str:
    try:
        text = json.dumps(value) if not isinstance(value, float) else repr(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
