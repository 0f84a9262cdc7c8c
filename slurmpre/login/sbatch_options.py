"""sbatch's own option grammar, to read ``extra_sbatch`` entries the way sbatch will.

sbatch reads several options from one ``#SBATCH`` line. It splits the line into
words with its own ``get_argument`` (src/sbatch/opt.c), not a shell's: quotes group,
a backslash escapes the next character *inside quotes too*, an unquoted ``#`` ends
the line, an empty word ends it as well, and a backslash before a space joins the
words from 24.11 on but splits them in 22.05. Then getopt_long reads the words:
``--opt=value`` and ``--opt value``, any unique prefix of a long option (``--constr``
is ``--constraint``; one option's two names, ``--tasks-per-node`` and
``--ntasks-per-node``, are one option), and bundled short options (``-HN5`` is
``--hold --nodes=5``). An entry is read here the same way, for every supported
release, and comes back as one normalized option per line (``--long=value``, quoted
so that sbatch reads it back as it is), so that what slurmpre manages (``--nodes``,
``--requeue``, ...) cannot be set behind its back. Pure functions, no Slurm needed.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum

from slurmpre.errors import SlurmpreError
from slurmpre.login.sbatch_releases import ALIASES, RELEASES, SHORT


class Arg(Enum):
    NONE = "N"
    REQUIRED = "R"
    OPTIONAL = "O"  # only as --opt=value, or glued to a short option (-k2)


def _table(release: str) -> dict[str, Arg]:
    return {name: Arg(kind) for name, kind in RELEASES[release].items()}


# Every long option of every supported release, by its own name (sbatch_releases.py is
# read from each release's src/common/slurm_opt.c); a name taken in one release only is
# still refused or resolved by what that release makes of it.
BY_RELEASE: dict[str, dict[str, Arg]] = {release: _table(release) for release in RELEASES}
LONG: dict[str, Arg] = {name: arg for table in BY_RELEASE.values() for name, arg in table.items()}

# What slurmpre writes itself, and the spec key to use instead.
MANAGED: dict[str, str] = {
    "job-name": "name",
    "nodes": "nodes",
    "ntasks": "nproc_per_node",
    "ntasks-per-node": "nproc_per_node",
    "requeue": "requeue",
    "no-requeue": "requeue",
    "constraint": "constraint",
    "output": "log_dir",
    "error": "log_dir",
    "open-mode": "log_dir",
    "array": "array",
    "signal": "warn_before_end",
    "partition": "partition",
    "account": "account",
    "qos": "qos",
    "time": "time",
    "mem": "mem",
    "gpus-per-node": "gpus_per_node",
    "gpus": "gpus",
    "cpus-per-task": "cpus_per_task",
}
# Options about submitting, not about the job: in a script they break it or do nothing.
NOT_FOR_A_SCRIPT = frozenset({"wrap", "parsable", "test-only", "wait", "help", "usage", "version"})


class OptionError(SlurmpreError, ValueError):
    """An entry sbatch would read differently than it looks, or that slurmpre must refuse."""


@dataclass(frozen=True)
class Option:
    name: str  # the long name, resolved
    value: str | None

    def render(self) -> str:
        if self.value is None:
            return f"--{self.name}"
        return f"--{self.name}={quote(self.value)}"


def quote(value: str) -> str:
    """``value`` quoted so that sbatch's ``#SBATCH`` reader, and a shell, read it back as
    it is: shell quoting where it holds no backslash (sbatch honours those quotes); else
    double quotes with ``\\`` and ``\"`` escaped, which is the one form both read alike
    (sbatch takes a backslash as an escape inside single quotes too)."""
    if "\\" not in value:
        return shlex.quote(value)
    return '"' + re.sub(r'(["\\$`])', r"\\\1", value) + '"'


# C's isspace() in the "C" locale: what ends a word on an #SBATCH line.
_SPACE = " \t\n\v\f\r"
_HET_SEPARATOR = re.compile(r"(?:packjob|hetjob)(?:[ \t\n\v\f\r]|$)", re.IGNORECASE)


def words(line: str, *, escaped_space: bool = True) -> list[str]:
    """The words sbatch reads from the rest of an ``#SBATCH`` line (``get_argument`` in
    src/sbatch/opt.c). ``escaped_space``: a backslash before an unquoted space keeps the
    space in the word (24.11 and later) instead of ending the word (22.05)."""
    out: list[str] = []
    pos, end = 0, len(line)
    while True:
        while pos < end and line[pos] in _SPACE:
            pos += 1
        if _HET_SEPARATOR.match(line, pos):
            raise OptionError(
                f"{line[pos : pos + 7].strip()!r} starts another component of a heterogeneous "
                "job to sbatch"
            )
        if pos < end and line[pos] == ":":
            raise OptionError("a word that starts with ':' stops sbatch ('Unexpected `:`')")
        if pos >= end:
            return out
        word: list[str] | None = None
        quoted, quote_char, escape = False, "", False
        while pos < end and (quoted or line[pos] not in _SPACE):
            c = line[pos]
            if escape:
                escape = False
            elif c == "\\":
                pos += 1
                if escaped_space and pos < end and line[pos] == " ":
                    word = [*(word or []), " "]
                    pos += 1
                else:
                    escape = True
                continue
            elif quoted:
                if c == quote_char:
                    quoted = False
                    pos += 1
                    continue
            elif c in "\"'":
                quoted, quote_char = True, c
                pos += 1
                continue
            elif c == "#":
                if word is not None:
                    raise OptionError(
                        "an unquoted '#' inside a word ends the line to sbatch: quote the value"
                    )
                break  # an unquoted '#' that starts a word: the rest is a comment
            word = [*(word or []), c]
            pos += 1
        if quoted:
            raise OptionError(f"an unmatched {quote_char} (sbatch stops: 'Unmatched')")
        if word is None:
            if line[pos : pos + 1] != "#" and line[pos:].strip(_SPACE):
                raise OptionError("an empty quoted word stops sbatch reading the rest of the line")
            return out  # a comment, or an empty word at the end: sbatch reads no further
        out.append("".join(word))


def resolve(name: str) -> str:
    """A long option name or prefix -> the option sbatch takes it for (as getopt_long does,
    in every supported release; one option's two names are one option)."""
    taken: dict[str, str] = {}  # release -> the option it reads
    ambiguous: dict[str, list[str]] = {}
    for release, table in BY_RELEASE.items():
        if name in table:
            taken[release] = ALIASES.get(name, name)
            continue
        matches = sorted({ALIASES.get(n, n) for n in table if n.startswith(name)})
        if len(matches) > 1:
            ambiguous[release] = matches
        elif matches:
            taken[release] = matches[0]
    if ambiguous:
        matches = sorted({m for found in ambiguous.values() for m in found})
        shown = ", ".join(f"--{m}" for m in matches[:6]) + (", ..." if len(matches) > 6 else "")
        raise OptionError(
            f"--{name} is ambiguous to {_which(ambiguous)} ({shown}): write the option in full"
        )
    managed = {r: o for r, o in taken.items() if o in MANAGED and o != name}
    if managed:
        option = sorted(managed.values())[0]
        raise OptionError(
            f"--{name} would be read by {_which(managed)} as --{option}, which slurmpre "
            f"sets itself: use the key {MANAGED[option]!r}"
        )
    read = set(taken.values())
    if len(read) > 1:
        raise OptionError(
            f"--{name} means {' or '.join(f'--{o}' for o in sorted(read))} depending on the "
            "Slurm release: write the option in full"
        )
    if read:
        return read.pop()
    if not _OPTION_NAME.fullmatch(name):
        raise OptionError(f"--{name} is not an option name sbatch could take")
    return name  # a plugin's option (SPANK), or a newer sbatch's: sbatch itself will judge


def _which(releases: Mapping[str, object]) -> str:
    """'sbatch' when every supported release does it, else the releases that do."""
    if len(releases) == len(BY_RELEASE):
        return "sbatch"
    return "sbatch " + " and ".join(sorted(releases))


_OPTION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*", re.ASCII)


# Managed options whose value the spec key takes as it is.
_SAME_VALUE = frozenset(
    {
        "partition",
        "account",
        "qos",
        "time",
        "mem",
        "gpus-per-node",
        "cpus-per-task",
        "constraint",
        "array",
    }
)


def _check(option: Option) -> Option:
    if option.name in MANAGED:
        key = MANAGED[option.name]
        hint = ""
        if option.name in _SAME_VALUE and option.value:
            hint = f" ({key} = {json.dumps(option.value)})"
        raise OptionError(f"slurmpre sets --{option.name} itself: use the key {key!r}{hint}")
    if option.name in NOT_FOR_A_SCRIPT:
        raise OptionError(f"--{option.name} is about submitting, not an option of the job")
    if option.name == "container" or option.name.startswith("container-"):
        raise OptionError(
            f"--{option.name} runs the batch script itself inside a container, where srun and "
            "scontrol are missing and slurmpre cannot watch or restart the job"
        )
    return option


def parse_entry(entry: str, *, refuse: bool = True) -> list[Option]:
    """One ``extra_sbatch`` entry (one or several options) -> the options sbatch will see.

    With ``refuse=False`` it only reads (e.g. a rendered script's own directives).
    """
    check = _check if refuse else (lambda option: option)
    read = words(entry)
    if read != words(entry, escaped_space=False):
        raise OptionError(
            "sbatch 22.05 and later releases read a backslash before a space differently: "
            "quote the value instead"
        )
    readings = {release: _getopt(read, table, check) for release, table in BY_RELEASE.items()}
    first, *others = readings.values()
    if any(other != first for other in others):
        shown = "; ".join(
            f"{release}: {' '.join(o.render() for o in opts)}" for release, opts in readings.items()
        )
        raise OptionError(f"sbatch releases read it differently ({shown})")
    return first


def _getopt(
    read: list[str], table: dict[str, Arg], check: Callable[[Option], Option]
) -> list[Option]:
    """The words as one release's getopt_long reads them (``table``: its options)."""
    out: list[Option] = []
    i = 0
    while i < len(read):
        word = read[i]
        i += 1
        if word.startswith("--") and len(word) > 2:
            name, eq, value = word[2:].partition("=")
            long = resolve(name)
            kind = table.get(long)
            if eq:
                if kind is Arg.NONE:
                    raise OptionError(f"--{long} takes no value, got {word!r}")
                out.append(check(Option(long, value)))
            elif kind is Arg.REQUIRED:
                if i >= len(read):
                    raise OptionError(f"--{long} needs a value")
                out.append(check(Option(long, read[i])))
                i += 1
            elif kind is None and i < len(read) and not read[i].startswith("-"):
                raise OptionError(
                    f"--{long} is not an option slurmpre knows: write its value as --{long}=VALUE"
                )
            else:
                out.append(check(Option(long, None)))
        elif word.startswith("-") and len(word) > 1 and word != "--":
            i = _short_bundle(word, read, i, out, check, table)
        else:
            raise OptionError(f"{word!r} is not an sbatch option (options start with -)")
    return out


def _short_bundle(
    word: str,
    words: list[str],
    i: int,
    out: list[Option],
    check: Callable[[Option], Option],
    table: dict[str, Arg],
) -> int:
    j = 1
    while j < len(word):
        letter = word[j]
        long = SHORT.get(letter)
        if long is None:
            raise OptionError(f"-{letter} is not an sbatch option")
        kind = table[long]
        rest = word[j + 1 :]
        if kind is Arg.REQUIRED:
            if rest:
                value = rest
            elif i < len(words):
                value, i = words[i], i + 1
            else:
                raise OptionError(f"-{letter} (--{long}) needs a value")
            out.append(check(Option(long, value)))
            return i
        if kind is Arg.OPTIONAL:  # getopt's "k::": only what follows in the same word
            out.append(check(Option(long, rest or None)))
            return i
        out.append(check(Option(long, None)))
        j += 1
    return i
