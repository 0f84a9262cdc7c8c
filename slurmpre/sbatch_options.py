"""sbatch's own option grammar, to read ``extra_sbatch`` entries the way sbatch will.

sbatch reads several options from one ``#SBATCH`` line, splits it into words
with shell-like quoting, accepts ``--opt=value`` and ``--opt value``, any unique
prefix of a long option (``--constr`` is ``--constraint``), and bundled short
options (``-HN5`` is ``--hold --nodes=5``). An entry is read here the same way
and comes back as one normalized option per line (``--long=value``), so that
what slurmpre manages (``--nodes``, ``--requeue``, ...) cannot be set behind
its back. Pure functions, no Slurm needed.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum


class Arg(Enum):
    NONE = "none"
    REQUIRED = "required"
    OPTIONAL = "optional"  # only as --opt=value


_R, _O, _N = Arg.REQUIRED, Arg.OPTIONAL, Arg.NONE

# sbatch(1), Slurm 22.05 to 26.05.
LONG: dict[str, Arg] = {
    "account": _R, "acctg-freq": _R, "array": _R, "batch": _R, "bb": _R, "bbf": _R,
    "begin": _R, "chdir": _R, "cluster-constraint": _R, "clusters": _R, "comment": _R,
    "constraint": _R, "container": _R, "container-id": _R, "contiguous": _N,
    "core-spec": _R, "cores-per-socket": _R, "cpu-freq": _R, "cpus-per-gpu": _R,
    "cpus-per-task": _R, "deadline": _R, "delay-boot": _R, "dependency": _R,
    "distribution": _R, "error": _R, "exclude": _R, "exclusive": _O, "export": _O,
    "export-file": _R, "extra": _R, "extra-node-info": _R, "get-user-env": _O, "gid": _R,
    "gpu-bind": _R, "gpu-freq": _R, "gpus": _R, "gpus-per-node": _R, "gpus-per-socket": _R,
    "gpus-per-task": _R, "gres": _R, "gres-flags": _R, "help": _N, "hint": _R, "hold": _N,
    "ignore-pbs": _N, "input": _R, "job-name": _R, "kill-on-invalid-dep": _R,
    "licenses": _R, "mail-type": _R, "mail-user": _R, "mcs-label": _R, "mem": _R,
    "mem-bind": _R, "mem-per-cpu": _R, "mem-per-gpu": _R, "mincpus": _R, "network": _R,
    "nice": _O, "no-kill": _O, "no-requeue": _N, "nodefile": _R, "nodelist": _R,
    "nodes": _R, "ntasks": _R, "ntasks-per-core": _R, "ntasks-per-gpu": _R,
    "ntasks-per-node": _R, "ntasks-per-socket": _R, "open-mode": _R, "output": _R,
    "overcommit": _N, "oversubscribe": _N, "parsable": _N, "partition": _R, "power": _R,
    "prefer": _R, "priority": _R, "profile": _R, "propagate": _O, "qos": _R, "quiet": _N,
    "reboot": _N, "requeue": _N, "reservation": _R, "segment": _R, "signal": _R,
    "sockets-per-node": _R, "spread-job": _N, "switches": _R, "test-only": _N,
    "thread-spec": _R, "threads-per-core": _R, "time": _R, "time-min": _R, "tmp": _R,
    "tres-bind": _R, "tres-per-task": _R, "uid": _R, "usage": _N, "use-min-nodes": _N,
    "verbose": _N, "version": _N, "wait": _N, "wait-all-nodes": _R, "wckey": _R, "wrap": _O,
}  # fmt: skip

SHORT: dict[str, str] = {
    "a": "array", "A": "account", "b": "begin", "B": "extra-node-info", "c": "cpus-per-task",
    "C": "constraint", "d": "dependency", "D": "chdir", "e": "error", "F": "nodefile",
    "G": "gpus", "H": "hold", "h": "help", "i": "input", "J": "job-name", "k": "no-kill",
    "L": "licenses", "M": "clusters", "m": "distribution", "n": "ntasks", "N": "nodes",
    "o": "output", "O": "overcommit", "p": "partition", "q": "qos", "Q": "quiet",
    "s": "oversubscribe", "S": "core-spec", "t": "time", "V": "version", "v": "verbose",
    "W": "wait", "w": "nodelist", "x": "exclude",
}  # fmt: skip

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


class OptionError(ValueError):
    """An entry sbatch would read differently than it looks, or that slurmpre must refuse."""


@dataclass(frozen=True)
class Option:
    name: str  # the long name, resolved
    value: str | None

    def render(self) -> str:
        if self.value is None:
            return f"--{self.name}"
        return f"--{self.name}={shlex.quote(self.value)}"


def resolve(name: str) -> str:
    """A long option name or prefix -> the option sbatch takes it for (as getopt_long does)."""
    if name in LONG:
        return name
    matches = sorted(n for n in LONG if n.startswith(name))
    if len(matches) > 1:
        shown = ", ".join(f"--{m}" for m in matches[:6]) + (", ..." if len(matches) > 6 else "")
        raise OptionError(f"--{name} is ambiguous to sbatch ({shown}): write the option in full")
    if matches and matches[0] in MANAGED:
        raise OptionError(
            f"--{name} would be read by sbatch as --{matches[0]}, which slurmpre sets itself: "
            f"use the key {MANAGED[matches[0]]!r}"
        )
    if matches:
        return matches[0]
    return name  # unknown here: perhaps a newer sbatch's option; sbatch itself will judge


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
    return option


def parse_entry(entry: str, *, refuse: bool = True) -> list[Option]:
    """One ``extra_sbatch`` entry (one or several options) -> the options sbatch will see.

    With ``refuse=False`` it only reads (e.g. a rendered script's own directives).
    """
    check = _check if refuse else (lambda option: option)
    try:
        words = shlex.split(entry)
    except ValueError as exc:
        raise OptionError(f"cannot be split into words ({exc})") from None
    out: list[Option] = []
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if word.startswith("--") and len(word) > 2:
            name, eq, value = word[2:].partition("=")
            long = resolve(name)
            kind = LONG.get(long)
            if eq:
                if kind is Arg.NONE:
                    raise OptionError(f"--{long} takes no value, got {word!r}")
                out.append(check(Option(long, value)))
            elif kind is Arg.REQUIRED:
                if i >= len(words):
                    raise OptionError(f"--{long} needs a value")
                out.append(check(Option(long, words[i])))
                i += 1
            elif kind is None and i < len(words) and not words[i].startswith("-"):
                raise OptionError(
                    f"--{long} is not an option slurmpre knows: write its value as --{long}=VALUE"
                )
            else:
                out.append(check(Option(long, None)))
        elif word.startswith("-") and len(word) > 1 and word != "--":
            i = _short_bundle(word, words, i, out, check)
        else:
            raise OptionError(f"{word!r} is not an sbatch option (options start with -)")
    return out


def _short_bundle(
    word: str, words: list[str], i: int, out: list[Option], check: Callable[[Option], Option]
) -> int:
    j = 1
    while j < len(word):
        letter = word[j]
        long = SHORT.get(letter)
        if long is None:
            raise OptionError(f"-{letter} is not an sbatch option")
        if LONG[long] is Arg.REQUIRED:
            rest = word[j + 1 :]
            if rest:
                value = rest.removeprefix("=")
            elif i < len(words):
                value, i = words[i], i + 1
            else:
                raise OptionError(f"-{letter} (--{long}) needs a value")
            out.append(check(Option(long, value)))
            return i
        out.append(check(Option(long, None)))
        j += 1
    return i
