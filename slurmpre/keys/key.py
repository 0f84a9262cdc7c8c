"""What a spec key is: its default, its parser, its documentation and the wrapper's
option it becomes (`slurmpre.keys` holds the table of them)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
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


def as_text(value: Any) -> str:
    if isinstance(value, enum.Enum):
        return str(value.value)
    return f"{value:g}" if isinstance(value, float) else str(value)
