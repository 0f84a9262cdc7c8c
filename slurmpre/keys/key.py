"""What a spec key is (`Key`), defined once as a field of its part of the spec (`key()`):
the field's name is the key's, its annotation the type `JobSpec` holds.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

REQUIRED: Any = object()  # no default: the spec must give it (name and command)


@dataclass(frozen=True)
class Key:
    name: str
    default: Any  # JobSpec's (a mutable one is given as its empty value: {} or ())
    parse: str  # the parser's name in slurmpre.login.parsers.PARSERS
    shown: str  # the default as docs/spec.md shows it
    doc: str  # what it means, as docs/spec.md says it
    flag: str | None = None  # the wrapper's option for it, when the job side needs it
    kind: str = ""  # the wrapper's type: seconds, count, text, switch or choice
    # When the batch script writes the option: always; set (not None); truthy; changed (not
    # the default); off (a switch, when the key is false); elastic_min (a node range's MIN);
    # elastic_max (the MAX of the spec's node range, when the key is true and it is a range).
    writes: str = ""
    joined: bool = False  # --flag=value (a value may start with "-"), else --flag value
    help: str = ""  # the wrapper's --help line for it
    choices: tuple[str, ...] | None = None
    bounds: tuple[float, float] | None = None  # the range a number must be in (both ends)
    # Where the wrapper holds the value (`slurmpre.job.start.args`): its part ("": the run's
    # options themselves, else "watch", "goals" or "limits"), under the key's name unless
    # `attr` gives the one that part reads it by, after the wrapper's `convert` (pattern,
    # signal, path, ...; "": as parsed).
    part: str = ""
    attr: str = ""
    convert: str = ""

    @property
    def dest(self) -> str:
        """The wrapper's argparse name for the option."""
        return str(self.flag)[2:].replace("-", "_")

    def written(self, value: Any, nodes: Any = None) -> list[str]:
        """The wrapper's option for the spec's ``value``, as the batch script writes it
        (``nodes``: the spec's node range, for a key written from it)."""
        if not self.flag:
            return []
        if self.writes == "elastic_max":
            return [self.flag, str(nodes.max)] if value and nodes and nodes.elastic else []
        if self.writes == "off":
            return [] if value else [self.flag]
        if self.writes == "elastic_min":
            return [self.flag, str(value.min)] if value.elastic and value.min > 1 else []
        skip = {"set": value is None, "truthy": not value, "changed": value == self.default}
        if skip.get(self.writes, False):
            return []
        text = as_text(value)
        return [f"{self.flag}={text}"] if self.joined else [self.flag, text]

    @property
    def wrapper_default(self) -> Any:
        """What the wrapper takes without the option (run by hand)."""
        if self.kind == "switch":
            return False
        if self.writes == "elastic_min":
            return self.default.min
        if self.writes == "elastic_max":
            return None
        return as_text(self.default) if self.kind == "choice" else self.default


def key(default: Any, parse: str, shown: str, doc: str, **options: Any) -> Any:
    """A key defined as a field of its part of the spec (a frozen dataclass); `table`
    names it after the field."""
    meta = {"key": Key("", default, parse, shown, doc, **options)}
    if default is REQUIRED:
        return field(metadata=meta)
    if isinstance(default, dict):  # mutable: one each
        return field(default_factory=dict, metadata=meta)
    return field(default=default, metadata=meta)


def table(part: type) -> tuple[Key, ...]:
    """The keys of a part of the spec, in its order, each named as its field."""
    return tuple(replace(f.metadata["key"], name=f.name) for f in fields(part))


def as_text(value: Any) -> str:
    if isinstance(value, enum.Enum):
        return str(value.value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def as_written(value: Any) -> str:
    """``value`` as a spec's TOML writes it, for a message that names what the user
    wrote: ``'a b'`` (or ``"it's"``, escaped where a literal string cannot hold it),
    ``12:00:00``, ``true``, ``["python", "x"]``; never a Python repr."""
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value)  # inf, -inf, nan
    if isinstance(value, str):
        return _toml_string(value)
    if callable(getattr(value, "isoformat", None)):  # a TOML date or time (datetime's)
        return str(value.isoformat())
    if isinstance(value, list | tuple):
        return "[" + ", ".join(as_written(item) for item in value) + "]"
    if isinstance(value, Mapping):
        items = (f"{_bare(str(k))} = {as_written(v)}" for k, v in value.items())
        return "{" + ", ".join(items) + "}"
    return _toml_string(str(value))


_BARE = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPES = {
    "\\": "\\\\",
    '"': '\\"',
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
}


def _bare(key: str) -> str:
    return key if _BARE.fullmatch(key) else _toml_string(key)


def _toml_string(text: str) -> str:
    """A literal string (``'...'``) when it can hold ``text`` as it is, else a basic
    string (``"..."``) with every character a terminal would not show as itself escaped."""
    if "'" not in text and text.isprintable():
        return f"'{text}'"
    out = []
    for char in text:
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif char.isprintable():
            out.append(char)
        else:
            code = ord(char)
            out.append(f"\\u{code:04X}" if code <= 0xFFFF else f"\\U{code:08X}")
    return '"' + "".join(out) + '"'
