"""``$VAR`` in spec values: one small syntax (`slurmpre.dollars`), expanded where its value
is known: ``env`` and ``command`` on the node, path keys here at submit (docs/spec.md,
"Variables"). Any other ``$`` is an error, so a value never reaches a shell that would
read ``$(...)``, ``${X:-y}`` or ``$1`` its own way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from slurmpre import dollars, environment, launchers
from slurmpre.errors import SpecError, UsageError
from slurmpre.keys import as_written


def _parts(key: str, text: str) -> list[tuple[str, str]]:
    """``text`` cut into ("text", literal) and ("var", NAME) parts (`slurmpre.dollars`)."""
    try:
        return dollars.parts(text)
    except UsageError as exc:
        raise SpecError(f"{key} = {as_written(text)}: {exc}") from None


# Characters that reorder how text is shown: a name or path holding one reads on a
# terminal as something else than it is.
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def plain_line(text: str) -> bool:
    """One line (none of Unicode's line breaks, as splitlines sees them), without control
    characters or bidirectional overrides."""
    if len(f"x{text}x".splitlines()) > 1:
        return False
    return not any(ord(c) < 32 or 127 <= ord(c) < 160 or c in _BIDI for c in text)


def check(key: str, text: str) -> str:
    """``text``, unchanged, once its every ``$`` is of the syntax above."""
    _parts(key, text)
    return text


def check_word(key: str, value: object, word: str) -> None:
    """One word of a list value (``value``, as written) is of the grammar."""
    try:
        dollars.parts(word)
    except UsageError as exc:
        raise SpecError(f"{key} = {as_written(value)}: in {as_written(word)}, {exc}") from None


# Besides slurmpre's, what Slurm sets in every job and step (SLURM_JOB_ID, SLURMD_NODENAME).
_SLURM = ("SLURM_", "SLURMD_")


def unknown_in_command(
    command: Sequence[str], env: Iterable[str], environ: Mapping[str, str], *, plain: bool
) -> list[str]:
    """The variables a checked command names that nothing is known to set where it runs:
    neither slurmpre (for every training: `environment.ALWAYS`; for a ``plain`` launcher,
    its rendezvous variables too), nor Slurm, nor the spec's ``env``, nor ``environ``
    (where you submit: sbatch hands it on to the job)."""
    known = {*environment.ALWAYS, *env, *environ, *(launchers.PLAIN_ENV if plain else ())}
    out: list[str] = []
    for word in command:
        for name in dollars.names(word) if "$" in word else ():
            if name not in known and not name.startswith(_SLURM) and name not in out:
                out.append(name)
    return out


def command_warning(unknown: Sequence[str]) -> str | None:
    """One line for `unknown_in_command`'s answer: not an error, the nodes may set them."""
    if not unknown:
        return None
    shown = ", ".join(f"${name}" for name in unknown)
    it, isnt = ("it", "is") if len(unknown) == 1 else ("them", "are")
    return (
        f"warning: command names {shown}, which {isnt} not set here, nor in the spec's env, "
        f"nor one slurmpre or Slurm sets: the job stops at its start unless the nodes set {it}"
    )


def double_quoted(key: str, text: str) -> str:
    """``text`` as a bash double-quoted word that expands its variables and nothing else."""
    out = []
    for kind, value in _parts(key, text):
        if kind == "var":
            out.append("${" + value + "}")
        else:
            out.append(re.sub(r'([\\"$`])', r"\\\1", value))
    return '"' + "".join(out) + '"'


def expand_path(key: str, text: str, environ: Mapping[str, str]) -> str:
    """A path key's value with ``~`` and its variables replaced from ``environ``."""
    given = text
    if text == "~" or text.startswith("~/"):
        text = "${HOME}" + text[1:]
    elif text.startswith("~"):
        raise SpecError(
            f"{key} = {as_written(given)}: only ~ alone (your $HOME) is read, not ~user"
        )
    out = []
    for kind, value in _parts(key, text):
        if kind == "var":
            if value not in environ:
                raise SpecError(
                    f"{key} = {as_written(given)}: ${value} is not set where you submit"
                )
            if not environ[value].strip():
                # "~/checkpoints/$EXP" with EXP empty is ~/checkpoints: somewhere else.
                raise SpecError(f"{key} = {as_written(given)}: ${value} is empty where you submit")
            if not plain_line(environ[value]):
                raise SpecError(
                    f"{key} = {as_written(given)}: ${value} holds a line break or a control "
                    "character where you submit"
                )
            value = environ[value]
        out.append(value)
    return "".join(out)


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Names bash keeps for itself: read-only (an export of one fails the script), reset by bash
# as it runs (the command would never see the value), or changing how the script itself is
# read. `BASH*` names are bash's too.
_BASH_OWN = frozenset({
    "_", "BASHOPTS", "BASHPID", "EUID", "PPID", "SHELLOPTS", "UID", "IFS", "ENV", "CDPATH",
    "GLOBIGNORE", "POSIXLY_CORRECT", "PS4", "LINENO", "RANDOM", "SRANDOM", "SECONDS",
    "EPOCHREALTIME", "EPOCHSECONDS", "FUNCNAME", "GROUPS", "HISTCMD", "OPTIND", "OPTARG",
    "OPTERR", "PIPESTATUS", "DIRSTACK", "FUNCNEST", "EXECIGNORE",
})  # fmt: skip


def parse_env(value: object) -> dict[str, str]:
    """The spec's ``env``: names the batch script can export, values checked as `check`."""
    if not isinstance(value, Mapping):
        raise SpecError(f'env = {as_written(value)}: must be a table of NAME = "value"')
    env = {}
    for k, v in value.items():
        if not isinstance(k, str) or not _ENV_NAME.fullmatch(k):
            raise SpecError(f"env key {k!r} is not a valid environment variable name")
        if k in _BASH_OWN or k.startswith("BASH"):
            raise SpecError(f"env key {k!r} is bash's own: the batch script cannot pass it on")
        if k.upper().startswith("SLURMPRE_") and k not in environment.USER_SET:
            raise SpecError(f"env key {k!r} is slurmpre's own: it sets this name itself")
        if isinstance(v, bool) or not isinstance(v, str | int | float):
            raise SpecError(f"env.{k} = {as_written(v)}: must be a string or a number")
        text = str(v)
        if "\0" in text:
            raise SpecError(f"env.{k} = {as_written(v)}: must not contain NUL bytes")
        env[k] = check(f"env.{k}", text)  # expanded on the node, at start
    return env
