"""Arguments of the Python API checked at the door: a wrong type is a `UsageError` naming
the argument (exit 2 on the command line), never a bare TypeError from deep inside."""

from __future__ import annotations

from os import PathLike
from typing import Any

from slurmpre.errors import UsageError

NUMBER = (int, float)
PATH = (str, PathLike)


def expect(
    name: str, value: Any, types: type | tuple[type, ...], what: str, *, optional: bool = False
) -> None:
    """Refuse ``value`` unless it is one of ``types`` (a bool only where bool is named;
    None where ``optional``): ``what`` says what ``name`` must be."""
    if optional and value is None:
        return
    kinds = types if isinstance(types, tuple) else (types,)
    if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
        raise UsageError(f"{name}={value!r}: must be {what}")


def flag(name: str, value: Any) -> None:
    expect(name, value, bool, "True or False")


def seconds(name: str, value: Any, *, optional: bool = False) -> None:
    expect(name, value, NUMBER, "a number of seconds", optional=optional)


def count(name: str, value: Any, *, optional: bool = False) -> None:
    expect(name, value, int, "a whole number", optional=optional)
