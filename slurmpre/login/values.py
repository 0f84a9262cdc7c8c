"""The value of each spec key, checked: one function per kind of value, each raising a
`SpecError` that names the key and the bad value."""

from __future__ import annotations

import re
from collections.abc import Mapping

from slurmpre import keys, signals
from slurmpre.errors import SpecError
from slurmpre.login import sbatch_options, variables
from slurmpre.noderange import NodeRange
from slurmpre.reading import MEDIUM, read_text

_TIME = re.compile(
    r"^(?:\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+|\d+-\d+:\d{1,2}|\d+-\d+:\d{1,2}:\d{1,2}"
    r"|UNLIMITED|INFINITE)$"
)
MEM = re.compile(r"^\d+[KMGT]?$")
WORD = re.compile(r"^[A-Za-z0-9_.,:+-]+$")
CONSTRAINT = re.compile(r"^[A-Za-z0-9_.&|,*\[\]():!-]+$")
_ARRAY = re.compile(r"^\d+(?:-\d+(?::\d+)?)?(?:,\d+(?:-\d+(?::\d+)?)?)*(?:%\d+)?$")
GPU_TYPE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def bad(key: str, value: object, why: str) -> SpecError:
    return SpecError(f"{key} = {keys.as_written(value)}: {why}")


def whole(key: str, value: object) -> int:
    """A whole number within the key's range (`keys.RANGES`)."""
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and re.fullmatch(r"-?\d{1,30}", value.strip()):
            value = int(value)
        else:
            raise bad(key, value, "must be a whole number")
    low, high = keys.RANGES[key]
    if value < low:
        raise bad(key, value, f"must be {low:g} or more")
    if value > high:
        raise bad(key, value, f"must be {int(high)} or less")
    return value


def _str(key: str, value: object) -> str:
    if not isinstance(value, str):
        raise bad(key, value, "must be a string")
    return value


def one_line(key: str, value: object) -> str:
    text = _str(key, value)
    if not variables.plain_line(text):
        raise bad(
            key, value, "must be one line without control characters or bidirectional overrides"
        )
    return text


def optional_word(key: str, value: object, pattern: re.Pattern[str], what: str) -> str | None:
    if value is None or value == "":
        return None
    text = _str(key, value).strip()
    if not pattern.match(text):
        raise bad(key, value, what)
    return text


def parse_nodes(value: object) -> NodeRange:
    key = "nodes"
    plain = isinstance(value, int | str) and not isinstance(value, bool)
    m = re.fullmatch(r"(-?\d{1,30})(?:-(-?\d{1,30}))?", str(value).strip()) if plain else None
    if not m:
        raise bad(key, value, 'must be a count such as 4 or a range such as "2-4"')
    lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
    if lo < 1:
        raise bad(key, value, "needs at least 1 node")
    most = int(keys.RANGES["nodes"][1])
    if hi > most:
        raise bad(key, value, f"is more than {most} nodes")
    if hi < lo:
        raise bad(key, value, f"the range's minimum {lo} is larger than its maximum {hi}")
    return NodeRange(lo, hi)


def parse_name(value: object) -> str:
    name = one_line("name", value)
    if not name.strip():
        raise bad("name", value, "must not be empty")
    if "/" in name or name in (".", ".."):
        raise bad("name", value, "names a folder of checkpoints: no '/', '.' or '..'")
    if len(name.encode()) > 200:
        raise bad("name", value, "is longer than 200 bytes")
    return name


def parse_command(value: object) -> tuple[str, ...]:
    import shlex

    if isinstance(value, str):
        try:
            argv = shlex.split(value)
        except ValueError as exc:
            raise bad("command", value, f"cannot be split into words ({exc})") from None
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        argv = list(value)
    else:
        raise bad("command", value, "must be a string or a list of strings")
    if not argv or not argv[0]:
        raise bad("command", value, "must name a program to run")
    if any("\0" in a for a in argv):
        raise bad("command", value, "must not contain NUL bytes")
    for word in argv:
        # $NAME expands on the node (`slurmpre.job.start.expand`): its grammar, checked here.
        variables.check_word("command", value, word)
    return tuple(argv)


def _lines(key: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(value.splitlines())
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise bad(key, value, "must be a string or a list of strings")


# Line breaks other than \\n: bash reads them as part of a word, sbatch and scontrol do not.
_ODD_BREAKS = "\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"


def parse_setup(value: object) -> tuple[str, ...]:
    lines = _lines("setup", value)
    for line in lines:
        if "\0" in line or any(c in line for c in _ODD_BREAKS):
            raise bad("setup", line, "must not contain NUL, \\r or Unicode line separators")
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
        if not variables.plain_line(entry):
            raise bad("extra_sbatch", item, "must be one line without control characters")
        try:
            options = sbatch_options.parse_entry(entry)
        except sbatch_options.OptionError as exc:
            raise bad("extra_sbatch", item, str(exc)) from None
        out += [option.render() for option in options]
    return tuple(out)


def boolean(key: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "yes", "no", "1", "0"):
        return value.strip().lower() in ("true", "yes", "1")
    raise bad(key, value, "must be true or false")


def seconds(key: str, value: object) -> float:
    """A finite number of seconds within the key's range (`keys.RANGES`)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise bad(key, value, "must be a number of seconds")
    try:
        number = float(value)
    except ValueError:
        raise bad(key, value, "must be a number of seconds") from None
    why = keys.in_range(key, number)
    if why is not None:
        raise bad(key, value, f"{why} seconds")
    return number


def parse_resume_arg(value: object) -> str:
    text = one_line("resume_arg", value).strip()
    if text in ("", "--") or text in keys.FLAGS:  # the wrapper's own: only a mistake
        raise bad("resume_arg", value, "cannot be right: give the flag your script reads")
    return text


def pattern(key: str, value: object) -> str:
    text = one_line(key, value)
    try:
        keys.pattern(text)
    except ValueError as exc:
        raise bad(key, value, str(exc)) from None
    return text


# Slurm keeps a time limit as an int of seconds (time_str2secs in src/common/parse_time.c),
# and array indexes below MaxArraySize, which can be at most 4000001 (slurm.conf(5)).
_INT_MAX = 2**31 - 1
_MAX_ARRAY_INDEX = 4_000_000


def time_limit(key: str, value: object) -> str | None:
    text = optional_word(
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
        raise bad(key, value, "is longer than Slurm can hold (about 68 years)")
    return text


def array(key: str, value: object) -> str | None:
    text = optional_word(
        key,
        value if not isinstance(value, int) or isinstance(value, bool) else str(value),
        _ARRAY,
        "must be a Slurm array range such as 0-99 or 1,3,5-7%4",
    )
    if text is None:
        return None
    ranges, _, limit = text.partition("%")
    if limit and int(limit) < 1:
        raise bad(key, value, "its %limit must run at least 1 task at a time")
    for part in ranges.split(","):
        span, _, step = part.partition(":")
        first, _, last = span.partition("-")
        lo, hi = int(first), int(last or first)
        if hi > _MAX_ARRAY_INDEX:
            raise bad(key, value, f"index {hi} is above {_MAX_ARRAY_INDEX}, more than Slurm allows")
        if hi < lo:
            raise bad(key, value, f"the range {span} runs backwards")
        if step and int(step) < 1:
            raise bad(key, value, f"the step of {part} must be 1 or more")
    return text


def signal_name(key: str, value: object) -> str:
    try:
        return signals.notice_signal(one_line(key, value)).name
    except ValueError as exc:
        raise bad(key, value, str(exc)) from None


NAME_MAX = 255  # bytes in one name of a path (Linux's NAME_MAX); slurmpre adds none past
PATH_MAX = 4000  # bytes in a whole path, with room for the names slurmpre adds below it


def path(key: str, value: object, environ: Mapping[str, str]) -> str:
    """An absolute path, its ``~`` and ``$VAR`` expanded from ``environ`` (at submit), that
    the file system can hold."""
    text = variables.expand_path(key, one_line(key, value), environ)
    if not text.startswith("/"):
        raise bad(key, value, "must be an absolute path (nodes do not share your working folder)")
    longest = max((len(part.encode()) for part in text.split("/")), default=0)
    if longest > NAME_MAX:
        raise bad(key, value, f"has a name of {longest} bytes: a file system holds {NAME_MAX}")
    if len(text.encode()) > PATH_MAX:
        raise bad(key, value, f"is {len(text.encode())} bytes long: more than {PATH_MAX}")
    return text


def local_dir(key: str, value: object) -> str:
    """``"off"``, ``"auto"``, or an absolute path on the nodes, its ``$VAR`` read there
    (checked on each node: the login node cannot see a node's own disk)."""
    text = one_line(key, value)
    if text in ("off", "auto"):
        return text
    variables.check(key, text)
    if not text.startswith(("/", "$")):
        raise bad(key, value, 'must be "off", "auto" or an absolute path on the nodes')
    return text


def accelerate_config(key: str, value: object, environ: Mapping[str, str]) -> str:
    """An Accelerate config file (``accelerate launch --config_file``): an absolute path
    to a readable regular file that parses as Accelerate reads it (JSON for ``.json``,
    else YAML) into a mapping, checked here, at submit."""
    text = path(key, value, environ)
    try:
        data = read_text(text, MEDIUM)
    except FileNotFoundError:
        raise bad(key, value, "does not exist") from None
    except UnicodeDecodeError:
        raise bad(key, value, "is not a text file") from None
    except OSError as exc:
        raise bad(key, value, f"cannot be read ({exc.strerror or exc})") from None
    parsed = _parse_config(key, value, text, data)
    if parsed is not None and not isinstance(parsed, dict):
        raise bad(key, value, "is not a mapping of Accelerate's settings")
    return text


def _parse_config(key: str, value: object, where: str, data: str) -> object:
    if where.endswith(".json"):
        import json

        try:
            return json.loads(data)
        except ValueError as exc:
            raise bad(key, value, f"is not JSON ({exc})") from None
    try:
        import yaml  # type: ignore[import-untyped]  # Accelerate's; without it, not parsed
    except ImportError:
        return None
    try:
        return yaml.safe_load(data)
    except yaml.YAMLError as exc:
        first = str(exc).replace("\n", " ")
        raise bad(key, value, f"is not YAML ({first})") from None


def parse_gpus(value: object, key: str = "gpus_per_node") -> tuple[str | None, int]:
    """``8``, ``"8"`` or ``"h100:8"`` -> (GPU type or None, the count)."""
    if isinstance(value, str) and ":" in value:
        gpu_type, _, count = value.rpartition(":")
        if not GPU_TYPE.match(gpu_type) or not count.strip():
            raise bad(key, value, "must be a count, or TYPE:COUNT such as h100:8")
        return gpu_type, whole(key, count.strip())
    return None, whole(key, value)
