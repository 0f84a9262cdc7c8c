"""``$NAME`` and ``${NAME}`` in the command, expanded on the node from the training's
environment as in double quotes (docs/spec.md, "Variables"). A variable not set there is
an error, never an empty string: ``--output_dir $OUT`` with no ``OUT`` would train into
the wrong folder.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from slurmpre import dollars
from slurmpre.errors import UsageError


def command(argv: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """``argv`` with every word's variables replaced from ``env``; a UsageError (one line)
    naming the argument and the variable that is not set, or the ``$`` that is none of
    the grammar's (`slurmpre.dollars`; `submit` refuses it first)."""
    return [word if "$" not in word else _word(word, env) for word in argv]


def _word(word: str, env: Mapping[str, str]) -> str:
    try:
        parts = dollars.parts(word)
    except UsageError as exc:
        raise UsageError(f"command argument {word!r}: {exc}") from None
    out = []
    for kind, value in parts:
        if kind == dollars.VAR:
            if value not in env:
                raise UsageError(
                    f"command argument {word!r}: ${value} is not set in the training's "
                    "environment (set it in the spec's env, or write $$ for a literal $)"
                )
            value = env[value]
        out.append(value)
    return "".join(out)
