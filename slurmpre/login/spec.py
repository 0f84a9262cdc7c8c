"""A job spec: one TOML file per job, validated into a frozen `JobSpec`.

Every key can also be set on the command line (``--set key=value``, the
command line wins). Every error names the key and the bad value, and is a
`SpecError` (exit code 2).
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from slurmpre import access, defaults, launchers, reading
from slurmpre.errors import UsageError
from slurmpre.job import options
from slurmpre.launchers import Launcher
from slurmpre.login import sbatch_options

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib


class SpecError(UsageError):
    """A job spec is malformed; the message names the key and the value."""


@dataclass(frozen=True)
class NodeRange:
    min: int
    max: int

    def __str__(self) -> str:
        return str(self.min) if self.min == self.max else f"{self.min}-{self.max}"

    @property
    def elastic(self) -> bool:
        return self.min != self.max


@dataclass(frozen=True)
class JobSpec:
    name: str
    command: tuple[str, ...]
    nodes: NodeRange = NodeRange(1, 1)
    gpus_per_node: int = 0
    gpu_type: str | None = None  # e.g. h100: --gpus-per-node=h100:8
    gpus: int = 0  # for the whole job, which Slurm spreads over the nodes: --gpus=h100:16
    cpus_per_task: int | None = None
    mem: str | None = None
    time: str | None = None
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = "preemptible"
    requeue: bool = True
    array: str | None = None
    checkpoint_dir: str = ""
    log_dir: str = ""
    launcher: Launcher = launchers.DEFAULT
    nproc_per_node: int | None = None  # None: one process per GPU Slurm gave the node
    env: Mapping[str, str] = field(default_factory=dict)
    setup: tuple[str, ...] = ()
    extra_sbatch: tuple[str, ...] = ()
    warn_before_end: int = defaults.WARN_BEFORE_END  # --signal warning before the time limit
    poll_interval: float = defaults.POLL_INTERVAL  # seconds between the watcher's Slurm queries
    preempt_window: int = defaults.PREEMPT_WINDOW  # drain -> node removal, in seconds
    safety_margin: int = defaults.SAFETY_MARGIN  # requeue anyway this long before the window closes
    drain_reason: str | None = None  # only drains whose reason matches this pattern are notices
    notice_signal: str | None = None  # also send this signal to the training processes
    watch: bool = True  # run the preemption watcher (off: resume and rendezvous only)
    in_place: bool = True  # a drained node other than the batch host: restart in the allocation
    resume_arg: str | None = None  # e.g. "--resume-from": the command gets the resume path
    file_access: str = "owner"  # who may read what slurmpre creates: "owner" or "group"
    python: str = ""  # the interpreter that has slurmpre on the nodes
    template: str | None = None

    @property
    def is_array(self) -> bool:
        return self.array is not None


KEYS = tuple(f.name for f in fields(JobSpec))


_TIME = re.compile(
    r"^(?:\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+|\d+-\d+:\d{1,2}|\d+-\d+:\d{1,2}:\d{1,2}"
    r"|UNLIMITED|INFINITE)$"
)
_MEM = re.compile(r"^\d+[KMGT]?$")
_WORD = re.compile(r"^[A-Za-z0-9_.,:+-]+$")
_CONSTRAINT = re.compile(r"^[A-Za-z0-9_.&|,*\[\]():!-]+$")
_ARRAY = re.compile(r"^\d+(?:-\d+(?::\d+)?)?(?:,\d+(?:-\d+(?::\d+)?)?)*(?:%\d+)?$")
_GPU_TYPE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _bad(key: str, value: object, why: str) -> SpecError:
    return SpecError(f"{key} = {value!r}: {why}")


def _int(key: str, value: object) -> int:
    """A whole number within the key's range (`defaults.RANGES`)."""
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and re.fullmatch(r"-?\d{1,30}", value.strip()):
            value = int(value)
        else:
            raise _bad(key, value, "must be a whole number")
    low, high = defaults.RANGES[key]
    if value < low:
        raise _bad(key, value, f"must be {low:g} or more")
    if value > high:
        raise _bad(key, value, f"must be {int(high)} or less")
    return value


def _str(key: str, value: object) -> str:
    if not isinstance(value, str):
        raise _bad(key, value, "must be a string")
    return value


def _has_line_break(text: str) -> bool:
    """Any of Unicode's line breaks (\\n, \\r, U+0085, U+2028, U+2029, ...), as splitlines sees."""
    return len(f"x{text}x".splitlines()) > 1


def _one_line(key: str, value: object) -> str:
    text = _str(key, value)
    if _has_line_break(text) or any(ord(c) < 32 or 127 <= ord(c) < 160 or c in _BIDI for c in text):
        raise _bad(
            key, value, "must be one line without control characters or bidirectional overrides"
        )
    return text


# Characters that reorder how text is shown: a name or path holding one reads on a
# terminal as something else than it is.
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _optional_word(key: str, value: object, pattern: re.Pattern[str], what: str) -> str | None:
    if value is None or value == "":
        return None
    text = _str(key, value).strip()
    if not pattern.match(text):
        raise _bad(key, value, what)
    return text


def parse_nodes(value: object) -> NodeRange:
    key = "nodes"
    if isinstance(value, int) and not isinstance(value, bool):
        text = str(value)
    elif isinstance(value, str):
        text = value.strip()
    else:
        raise _bad(key, value, 'must be a count such as 4 or a range such as "2-4"')
    m = re.fullmatch(r"(-?\d{1,30})(?:-(-?\d{1,30}))?", text)
    if not m:
        raise _bad(key, value, 'must be a count such as 4 or a range such as "2-4"')
    lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
    if lo < 1:
        raise _bad(key, value, "needs at least 1 node")
    most = int(defaults.RANGES["nodes"][1])
    if hi > most:
        raise _bad(key, value, f"is more than {most} nodes")
    if hi < lo:
        raise _bad(key, value, f"the range's minimum {lo} is larger than its maximum {hi}")
    return NodeRange(lo, hi)


def parse_name(value: object) -> str:
    name = _one_line("name", value)
    if not name.strip():
        raise _bad("name", value, "must not be empty")
    if "/" in name or name in (".", ".."):
        raise _bad("name", value, "names a folder of checkpoints: no '/', '.' or '..'")
    if len(name.encode()) > 200:
        raise _bad("name", value, "is longer than 200 bytes")
    return name


def parse_command(value: object) -> tuple[str, ...]:
    import shlex

    if isinstance(value, str):
        try:
            argv = shlex.split(value)
        except ValueError as exc:
            raise _bad("command", value, f"cannot be split into words ({exc})") from None
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        argv = list(value)
    else:
        raise _bad("command", value, "must be a string or a list of strings")
    if not argv or not argv[0]:
        raise _bad("command", value, "must name a program to run")
    if any("\0" in a for a in argv):
        raise _bad("command", value, "must not contain NUL bytes")
    return tuple(argv)


def _lines(key: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(value.splitlines())
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise _bad(key, value, "must be a string or a list of strings")


# Line breaks other than \\n: bash reads them as part of a word, sbatch and scontrol do not.
_ODD_BREAKS = "\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"


def parse_setup(value: object) -> tuple[str, ...]:
    lines = _lines("setup", value)
    for line in lines:
        if "\0" in line or any(c in line for c in _ODD_BREAKS):
            raise _bad("setup", line, "must not contain NUL, \\r or Unicode line separators")
    if lines:
        _check_shell(lines)
    return lines


def _check_shell(lines: tuple[str, ...]) -> None:
    """The setup block must be whole shell commands: an unterminated heredoc, quote or
    ``if`` would swallow the launch line below it, and the job would end COMPLETED
    without training. bash itself judges (``bash -n``: read, run nothing); the rendered
    script also checks at run time that the block ended (an end marker)."""
    from slurmpre import cmd
    from slurmpre.errors import CommandError

    text = "\n".join(lines) + "\n: slurmpre setup ends here\n"
    try:
        result = cmd.run(["bash", "-n"], input=text, check=False, timeout=30)
    except CommandError as exc:
        raise SpecError(f"setup: cannot check it with bash: {exc}") from None
    problem = result.stderr.strip().splitlines()
    if result.returncode != 0 or any("here-document" in line for line in problem):
        why = problem[0] if problem else f"bash -n exited {result.returncode}"
        why = why.removeprefix("bash: ").removeprefix("line ")
        raise SpecError(
            f"setup: its lines are not whole shell commands ({why}); an unterminated heredoc, "
            "quote or block would swallow the command that launches the training"
        )


def parse_extra_sbatch(value: object) -> tuple[str, ...]:
    """Each entry read as sbatch reads an ``#SBATCH`` line; one normalized option per line.

    An option slurmpre manages is refused however it is spelled (a unique
    prefix, a short option, one of several on a line), naming the key to use.
    """
    items = _lines("extra_sbatch", value)
    out: list[str] = []
    for item in items:
        entry = item.strip()
        if entry.startswith("#SBATCH"):
            entry = entry[len("#SBATCH") :].strip()
        if not entry:
            continue
        if _has_line_break(entry) or any(ord(c) < 32 for c in entry):
            raise _bad("extra_sbatch", item, "must be one line without control characters")
        try:
            options = sbatch_options.parse_entry(entry)
        except sbatch_options.OptionError as exc:
            raise _bad("extra_sbatch", item, str(exc)) from None
        out += [option.render() for option in options]
    return tuple(out)


def parse_env(value: object) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise _bad("env", value, 'must be a table of NAME = "value"')
    env = {}
    for k, v in value.items():
        if not isinstance(k, str) or not _ENV_NAME.fullmatch(k):
            raise SpecError(f"env key {k!r} is not a valid environment variable name")
        if isinstance(v, bool) or not isinstance(v, str | int | float):
            raise _bad(f"env.{k}", v, "must be a string or a number")
        text = str(v)
        if "\0" in text:
            raise _bad(f"env.{k}", v, "must not contain NUL bytes")
        env[k] = text
    return env


def _bool(key: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "yes", "no", "1", "0"):
        return value.strip().lower() in ("true", "yes", "1")
    raise _bad(key, value, "must be true or false")


def _seconds(key: str, value: object) -> float:
    """A finite number of seconds within the key's range (`defaults.RANGES`)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise _bad(key, value, "must be a number of seconds")
    try:
        number = float(value)
    except ValueError:
        raise _bad(key, value, "must be a number of seconds") from None
    why = options.in_range(key, number)
    if why is not None:
        raise _bad(key, value, f"{why} seconds")
    return number


def parse_resume_arg(value: object) -> str:
    text = _one_line("resume_arg", value).strip()
    if text in ("", "--") or text in options.FLAGS:  # the wrapper's own: only a mistake
        raise _bad("resume_arg", value, "cannot be right: give the flag your script reads")
    return text


def _pattern(key: str, value: object) -> str | None:
    if value in (None, ""):
        return None
    text = _one_line(key, value)
    try:
        options.pattern(text)
    except ValueError as exc:
        raise _bad(key, value, str(exc)) from None
    return text


# Slurm keeps a time limit as an int of seconds (time_str2secs in src/common/parse_time.c),
# and array indexes below MaxArraySize, which can be at most 4000001 (slurm.conf(5)).
_INT_MAX = 2**31 - 1
_MAX_ARRAY_INDEX = 4_000_000


def _time(key: str, value: object) -> str | None:
    text = _optional_word(
        key, value, _TIME, "must be a Slurm time such as 90, 4:00:00 or 2-12:00:00"
    )
    if text is None or text in ("UNLIMITED", "INFINITE"):
        return text
    days, _, clock = text.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    if days:  # days-hours[:minutes[:seconds]]
        parts += [0] * (3 - len(parts))
        seconds = int(days) * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2]
    elif len(parts) == 3:  # hours:minutes:seconds
        seconds = parts[0] * 3600 + parts[1] * 60 + parts[2]
    else:  # minutes[:seconds]
        seconds = parts[0] * 60 + (parts[1] if len(parts) > 1 else 0)
    if max([*parts, int(days or 0)]) > _INT_MAX or seconds > _INT_MAX:
        raise _bad(key, value, "is longer than Slurm can hold (about 68 years)")
    return text


def _array(key: str, value: object) -> str | None:
    text = _optional_word(
        key,
        value if not isinstance(value, int) or isinstance(value, bool) else str(value),
        _ARRAY,
        "must be a Slurm array range such as 0-99 or 1,3,5-7%4",
    )
    if text is None:
        return None
    ranges, _, limit = text.partition("%")
    if limit and int(limit) < 1:
        raise _bad(key, value, "its %limit must run at least 1 task at a time")
    for part in ranges.split(","):
        span, _, step = part.partition(":")
        first, _, last = span.partition("-")
        lo, hi = int(first), int(last or first)
        if hi > _MAX_ARRAY_INDEX:
            raise _bad(
                key, value, f"index {hi} is above {_MAX_ARRAY_INDEX}, more than Slurm allows"
            )
        if hi < lo:
            raise _bad(key, value, f"the range {span} runs backwards")
        if step and int(step) < 1:
            raise _bad(key, value, f"the step of {part} must be 1 or more")
    return text


def _signal_name(key: str, value: object) -> str | None:
    if value in (None, ""):
        return None
    try:
        return options.notice_signal(_one_line(key, value)).name
    except ValueError as exc:
        raise _bad(key, value, str(exc)) from None


def _path(key: str, value: object) -> str:
    text = _one_line(key, value)
    if not text.startswith("/"):
        raise _bad(key, value, "must be an absolute path (nodes do not share your working folder)")
    return text


def validate(
    raw: Mapping[str, Any], *, user: str | None = None, python: str | None = None
) -> JobSpec:
    """A raw mapping (from TOML and ``--set``) -> a checked JobSpec."""
    unknown = [k for k in raw if k not in KEYS]
    if unknown:
        key = unknown[0]
        close = [k for k in KEYS if k.startswith(key) or key.startswith(k)]
        close = close or difflib.get_close_matches(key, KEYS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise SpecError(f"unknown key {key!r}{hint}")
    if "name" not in raw:
        raise SpecError("name: missing (every job needs a name)")
    if "command" not in raw:
        raise SpecError("command: missing (what should the job run?)")
    name = parse_name(raw["name"])
    explicit_user = user
    kw: dict[str, Any] = {"name": name, "command": parse_command(raw["command"])}
    for key, value in raw.items():
        if key in ("name", "command"):
            continue
        if key == "nodes":
            kw[key] = parse_nodes(value)
        elif key in ("gpus_per_node", "gpus"):
            _, kw[key] = parse_gpus(value, key)  # its type: after the loop
        elif key in ("warn_before_end", "safety_margin", "preempt_window"):
            kw[key] = _int(key, value)
        elif key in ("cpus_per_task", "nproc_per_node"):
            kw[key] = None if value in (None, "", "auto") else _int(key, value)
        elif key == "poll_interval":
            kw[key] = _seconds(key, value)
        elif key == "drain_reason":
            kw[key] = _pattern(key, value)
        elif key == "notice_signal":
            kw[key] = _signal_name(key, value)
        elif key == "mem":
            kw[key] = _optional_word(key, value, _MEM, "must be a size such as 64G or 512M")
        elif key == "time":
            kw[key] = _time(key, value)
        elif key in ("partition", "account", "qos"):
            kw[key] = _optional_word(
                key, value, _WORD, "must be one word of letters, digits, . _ -"
            )
        elif key == "constraint":
            kw[key] = _optional_word(
                key, value, _CONSTRAINT, "must be a Slurm feature expression such as preemptible"
            )
        elif key == "array":
            kw[key] = _array(key, value)
        elif key in ("requeue", "watch", "in_place"):
            kw[key] = _bool(key, value)
        elif key in ("checkpoint_dir", "log_dir"):
            kw[key] = _path(key, value)
        elif key == "launcher":
            try:
                kw[key] = Launcher(value)
            except ValueError:
                raise _bad(key, value, "must be 'torchrun', 'accelerate' or 'plain'") from None
        elif key == "gpu_type":
            if value in (None, ""):
                continue
            if not isinstance(value, str) or not _GPU_TYPE.match(value):
                raise _bad(key, value, "must be a GPU type such as h100 (letters, digits, _.-)")
            kw[key] = value
        elif key == "file_access":
            if not isinstance(value, str) or value not in access.NAMES:
                raise _bad(key, value, "must be 'owner' or 'group'")
            kw[key] = value
        elif key == "env":
            kw[key] = parse_env(value)
        elif key == "setup":
            kw[key] = parse_setup(value)
        elif key == "extra_sbatch":
            kw[key] = parse_extra_sbatch(value)
        elif key == "resume_arg":
            kw[key] = None if value in (None, "") else parse_resume_arg(value)
        elif key == "python":
            kw[key] = _path(key, value)
        elif key == "template":
            kw[key] = None if value in (None, "") else _one_line(key, value)
    for key in ("gpus_per_node", "gpus"):
        typed = parse_gpus(raw[key], key)[0] if key in raw else None
        if typed is None:
            continue
        if kw.get("gpu_type") not in (None, typed):
            raise _bad("gpu_type", kw["gpu_type"], f"but {key} names {typed!r}")
        kw["gpu_type"] = typed
    spec = JobSpec(**kw)
    if spec.gpus and spec.gpus_per_node:
        raise _bad("gpus", spec.gpus, "asks for GPUs per job, and gpus_per_node per node: give one")
    if spec.gpu_type is not None and not (spec.gpus_per_node or spec.gpus):
        raise _bad("gpu_type", spec.gpu_type, "needs gpus_per_node or gpus of 1 or more")
    nested = launchers.own(spec.command)
    if nested is not None:
        raise _bad("command", " ".join(spec.command[:3]), launchers.NESTED[nested])
    if spec.safety_margin >= spec.preempt_window:
        raise _bad(
            "safety_margin",
            spec.safety_margin,
            f"must be smaller than preempt_window ({spec.preempt_window})",
        )
    if spec.poll_interval >= spec.preempt_window - spec.safety_margin:
        raise _bad(
            "poll_interval",
            spec.poll_interval,
            f"must be shorter than preempt_window - safety_margin "
            f"({spec.preempt_window - spec.safety_margin} s), or a drain is seen too late",
        )
    if not spec.checkpoint_dir:
        # $HOME is on the shared volume (/home on the provider's clusters); a user given
        # explicitly (tests, another account) gets /home/<user>.
        home = f"/home/{explicit_user}" if explicit_user else str(Path.home())
        spec = replace(spec, checkpoint_dir=f"{home}/checkpoints/{name}")
    if not spec.log_dir:
        spec = replace(spec, log_dir=f"{spec.checkpoint_dir}/logs")
    if not spec.python:
        spec = replace(spec, python=python or sys.executable)
    return spec


def parse_gpus(value: object, key: str = "gpus_per_node") -> tuple[str | None, int]:
    """``8``, ``"8"`` or ``"h100:8"`` -> (GPU type or None, the count)."""
    if isinstance(value, str) and ":" in value:
        gpu_type, _, count = value.rpartition(":")
        if not _GPU_TYPE.match(gpu_type) or not count.strip():
            raise _bad(key, value, "must be a count, or TYPE:COUNT such as h100:8")
        return gpu_type, _int(key, count.strip())
    return None, _int(key, value)


def parse_sets(items: Sequence[str]) -> dict[str, Any]:
    """``["nodes=2-4", "env.SEED=1"]`` -> {"nodes": "2-4", "env": {"SEED": "1"}}.

    A value is read as TOML when it parses (``requeue=false``, ``nodes=4``),
    else taken as a plain string.
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise SpecError(f"--set {item!r}: expected key=value")
        try:
            value: Any = tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            value = text
        if key.startswith("env."):
            out.setdefault("env", {})[key[4:]] = value if isinstance(value, str) else text
        else:
            out[key] = value
    return out


def read(path: Path) -> dict[str, Any]:
    """The spec file's TOML as a mapping, not yet validated; a SpecError naming the file."""
    try:
        raw: dict[str, Any] = tomllib.loads(reading.read_text(path, reading.MEDIUM))
    except FileNotFoundError:
        raise SpecError(f"spec file {str(path)!r} does not exist") from None
    except UnicodeDecodeError:
        raise SpecError(f"spec file {str(path)!r} is not UTF-8 text") from None
    except OSError as exc:
        raise SpecError(f"cannot read spec file {str(path)!r}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:
        raise SpecError(f"{path}: nested too deeply to be a job spec") from None
    return raw


def load(
    path: Path,
    sets: Sequence[str] = (),
    *,
    user: str | None = None,
    python: str | None = None,
) -> JobSpec:
    """Read a TOML spec, apply ``--set`` overrides (command line wins), validate."""
    raw = read(path)
    overrides = parse_sets(sets)
    env = None
    if "env" in overrides:
        base = raw.get("env", {})
        if not isinstance(base, Mapping):
            raise _bad("env", base, 'must be a table of NAME = "value"')
        env = {**base, **overrides.pop("env")}
    raw.update(overrides)
    if env is not None:
        raw["env"] = env
    if "name" not in raw:
        raw["name"] = path.stem
    spec = validate(raw, user=user, python=python)
    if spec.template is not None and not spec.template.startswith("/"):
        spec = replace(spec, template=str((path.parent / spec.template).resolve()))
    return spec
