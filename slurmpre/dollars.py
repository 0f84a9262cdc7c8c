"""``$NAME``, ``${NAME}`` and ``$$``: the one grammar of variables in spec values
(docs/spec.md, "Variables"). Pure: the login side checks and renders values with it
(`slurmpre.login.variables`), the job side expands a command with it (`slurmpre.job.start.expand`).
"""

from __future__ import annotations

import re

from slurmpre.errors import UsageError

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_TOKEN = re.compile(rf"\$(?:\$|(?P<bare>{_NAME})|\{{(?P<braced>{_NAME})\}})")

TEXT, VAR = "text", "var"


def parts(text: str) -> list[tuple[str, str]]:
    """``text`` cut into (TEXT, literal) and (VAR, NAME) parts; a UsageError saying
    which ``$`` is none of the grammar's (the caller names the value)."""
    out: list[tuple[str, str]] = []
    pos = 0
    while (at := text.find("$", pos)) >= 0:
        if at > pos:
            out.append((TEXT, text[pos:at]))
        m = _TOKEN.match(text, at)
        if m is None and text.startswith("${", at) and "}" not in text[at:]:
            raise UsageError(f"{text[at:]!r} has no closing }} (write $$ for a literal $)")
        if m is None:
            shown = text[at : at + 3]
            raise UsageError(f"{shown!r} is not $NAME, ${{NAME}} or $$ (write $$ for a literal $)")
        name = m.group("bare") or m.group("braced")
        if name == "_":
            raise UsageError("$_ is the shell's last argument, not a variable")
        out.append((VAR, name) if name else (TEXT, "$"))
        pos = m.end()
    if pos < len(text):
        out.append((TEXT, text[pos:]))
    return out


def names(text: str) -> list[str]:
    """The variables ``text`` names, in order (a UsageError as `parts`)."""
    return [value for kind, value in parts(text) if kind == VAR]
