"""``extra_sbatch`` read as sbatch reads an ``#SBATCH`` line, to refuse what slurmpre sets
(the rules, from sbatch's source: docs/spec.md, "How `extra_sbatch` is read").

slurmpre gives sbatch the options it sets on sbatch's command line too
(`slurmpre.login.render.command_line`), which sbatch takes over the script's ``#SBATCH``
lines in every spelling (measured on 22.05, 24.11 and 26.05). An entry must still not
name one of them: sbatch keeps another option of the same field beside it (``--ntasks``
beside ``--ntasks-per-node``, ``--gpus`` beside ``--gpus-per-node``, ``--error`` beside
``--output``), 26.05 keeps ``--requeue=expedite`` beside the command line's ``--requeue``,
and a key the spec leaves unset is given nowhere else.

getopt_long takes any unique prefix of a release's long options, and those differ between
releases; so instead of each release's table, a name that is the name or a prefix of an
option slurmpre sets (or of a second name) is refused. What else a name means is
sbatch's to judge at submit (``submit --test-only``).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass

from slurmpre.errors import SlurmpreError

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


# Second names, as getopt_long takes them: the option sbatch reads.
ALIASES: dict[str, str] = {"tasks-per-node": "ntasks-per-node"}
# sbatch's short options (the same in 22.05, 24.11 and 26.05): the long option each is.
SHORT: dict[str, str] = {
    "A": "account", "B": "extra-node-info", "C": "constraint", "D": "chdir",
    "F": "nodefile", "G": "gpus", "H": "hold", "J": "job-name", "L": "licenses",
    "M": "clusters", "N": "nodes", "O": "overcommit", "Q": "quiet", "S": "core-spec",
    "V": "version", "W": "wait", "a": "array", "b": "begin", "c": "cpus-per-task",
    "d": "dependency", "e": "error", "h": "help", "i": "input", "k": "no-kill",
    "m": "distribution", "n": "ntasks", "o": "output", "p": "partition", "q": "qos",
    "s": "oversubscribe", "t": "time", "v": "verbose", "w": "nodelist", "x": "exclude",
}  # fmt: skip
SHORT_FLAGS = frozenset("HOQVWhsv")  # no value; -k's value is only the rest of its word


class OptionError(SlurmpreError, ValueError):
    """An entry sbatch would read differently than it looks, or that slurmpre must refuse."""


@dataclass(frozen=True)
class Option:
    name: str  # as written (a prefix sbatch resolves), or a short option's long name
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
    """``name`` (after ``--``) when sbatch could not read it as an option slurmpre sets
    (see the module's doc); else an OptionError naming the key to use."""
    if not _OPTION_NAME.fullmatch(name):
        raise OptionError(f"--{name} is not an option name sbatch could take")
    if name in MANAGED:
        return name  # `_check` names its key
    read = sorted(
        {ALIASES.get(full, full) for full in (*MANAGED, *ALIASES) if full.startswith(name)}
    )
    if len(read) > 1:
        shown = ", ".join(f"--{m}" for m in read[:6]) + (", ..." if len(read) > 6 else "")
        raise OptionError(f"--{name} is ambiguous to sbatch ({shown}): write the option in full")
    if read:
        raise OptionError(
            f"--{name} would be read by sbatch as --{read[0]} (or be ambiguous to it), which "
            f"slurmpre sets itself: use the key {MANAGED[read[0]]!r}"
        )
    for special in (*sorted(NOT_FOR_A_SCRIPT), "container"):
        if special.startswith(name):
            return special  # read as sbatch would, so `_check` refuses it
    return name


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


def parse_entry(entry: str) -> list[Option]:
    """One ``extra_sbatch`` entry (one or several options) -> the options sbatch will see."""
    read = words(entry)
    if read != words(entry, escaped_space=False):
        raise OptionError(
            "sbatch 22.05 and later releases read a backslash before a space differently: "
            "quote the value instead"
        )
    out: list[Option] = []
    i = 0
    while i < len(read):
        word = read[i]
        i += 1
        if word.startswith("--") and len(word) > 2:
            name, eq, value = word[2:].partition("=")
            name = resolve(name)
            if not eq and i < len(read) and not read[i].startswith("-"):
                eq, value, i = "=", read[i], i + 1  # sbatch refuses it after a flag
            out.append(_check(Option(name, value if eq else None)))
        elif word.startswith("-") and len(word) > 1 and word != "--":
            i = _short_bundle(word, read, i, out)
        else:
            raise OptionError(f"{word!r} is not an sbatch option (options start with -)")
    return out


def _short_bundle(word: str, words: list[str], i: int, out: list[Option]) -> int:
    """Bundled short options as getopt reads them: flags, then at most one with a value."""
    for j, letter in enumerate(word[1:], start=2):
        long = SHORT.get(letter)
        if long is None:
            raise OptionError(f"-{letter} is not an sbatch option")
        if letter in SHORT_FLAGS:
            out.append(_check(Option(long, None)))
            continue
        rest = word[j:]
        if letter == "k" or rest:  # getopt's "k::": only what follows in the same word
            out.append(_check(Option(long, rest or None)))
        elif i < len(words):
            out.append(_check(Option(long, words[i])))
            i += 1
        else:
            raise OptionError(f"-{letter} (--{long}) needs a value")
        return i
    return i
