"""The parsers the table of spec keys names (`slurmpre.keys`), all of one shape:
``(key, value, environ) -> the typed value``, a `SpecError` naming the key otherwise."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any

from slurmpre import keys
from slurmpre.errors import SpecError
from slurmpre.launchers import Launcher
from slurmpre.login import bounds, variables
from slurmpre.login import values as v

Parser = Callable[[str, Any, Mapping[str, str]], Any]


def _unset(value: object) -> bool:
    return value is None or value == ""


def _choice(key: str, value: Any, environ: Mapping[str, str]) -> str:
    names = [keys.as_written(n) for n in keys.BY_NAME[key].choices or ()]
    if not isinstance(value, str) or keys.as_written(value) not in names:
        either = ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]
        raise v.bad(key, value, f"must be {either}")
    return value


def _launcher(key: str, value: Any, environ: Mapping[str, str]) -> Launcher:
    return Launcher(_choice(key, value, environ))


def _gpu_type(key: str, value: Any, environ: Mapping[str, str]) -> str | None:
    if _unset(value):
        return None
    if not isinstance(value, str) or not v.GPU_TYPE.match(value):
        raise v.bad(key, value, "must be a GPU type such as h100 (letters, digits, _.-)")
    return value


def _template(key: str, value: Any, environ: Mapping[str, str]) -> str | None:
    """A path key too; a relative one is to the spec's folder (`spec.from_raw`)."""
    return None if _unset(value) else variables.expand_path(key, v.one_line(key, value), environ)


WORD = "must be one word of letters, digits, . _ -"
FEATURES = "must be a Slurm feature expression such as preemptible"

PARSERS: dict[str, Parser] = {
    "name": lambda k, x, e: v.parse_name(x),
    "command": lambda k, x, e: v.parse_command(x),
    "nodes": lambda k, x, e: v.parse_nodes(x),
    "gpus": lambda k, x, e: v.parse_gpus(x, k)[1],  # the type: `gpu_types`
    "gpu_type": _gpu_type,
    "whole": lambda k, x, e: v.whole(k, x),
    "whole_or_auto": lambda k, x, e: None if _unset(x) or x == "auto" else v.whole(k, x),
    "seconds": lambda k, x, e: v.seconds(k, x),
    "pattern": lambda k, x, e: None if _unset(x) else v.pattern(k, x),
    "signal_name": lambda k, x, e: None if _unset(x) else v.signal_name(k, x),
    "mem": lambda k, x, e: v.optional_word(k, x, v.MEM, "must be a size such as 64G or 512M"),
    "time_limit": lambda k, x, e: v.time_limit(k, x),
    "word": lambda k, x, e: v.optional_word(k, x, v.WORD, WORD),
    "constraint": lambda k, x, e: v.optional_word(k, x, v.CONSTRAINT, FEATURES),
    "array": lambda k, x, e: v.array(k, x),
    "boolean": lambda k, x, e: v.boolean(k, x),
    "path": lambda k, x, e: v.path(k, x, e),
    "launcher": _launcher,
    "restart": _choice,
    "snapshot": _choice,
    "file_access": _choice,
    "env": lambda k, x, e: variables.parse_env(x),
    "setup": lambda k, x, e: v.parse_setup(x),
    "extra_sbatch": lambda k, x, e: v.parse_extra_sbatch(x),
    "resume_arg": lambda k, x, e: None if _unset(x) else v.parse_resume_arg(x),
    "accelerate_config": lambda k, x, e: None if _unset(x) else v.accelerate_config(k, x, e),
    "local_dir": lambda k, x, e: v.local_dir(k, x),
    "template": _template,
    "deadline": lambda k, x, e: None if _unset(x) else bounds.deadline(k, x),
    "optional_whole": lambda k, x, e: None if _unset(x) else v.whole(k, x),
    "duration": lambda k, x, e: None if _unset(x) else bounds.duration(k, x),
    "money": lambda k, x, e: None if _unset(x) else bounds.money(k, x),
}


# The parsers of values that are strings. TOML reads some bare words as other kinds
# (`account = 12345` an integer, `time = 12:00:00` a time of day, a date and time for a
# deadline): for these keys such a value is taken as it is written; `--set KEY=VALUE`
# takes VALUE as written (`spec.parse_sets`).
TEXT = frozenset({
    "name", "gpu_type", "mem", "time_limit", "word", "constraint", "array", "path",
    "pattern", "signal_name", "launcher", "restart", "snapshot", "file_access",
    "resume_arg", "accelerate_config", "template", "deadline", "local_dir",
})  # fmt: skip


def takes_text(key: str) -> bool:
    """Whether the spec key ``key`` is a string (an unknown key is not)."""
    found = keys.BY_NAME.get(key)
    return found is not None and found.parse in TEXT


def parse(key: str, value: Any, environ: Mapping[str, str]) -> Any:
    """``value`` of the spec key ``key``, by the parser its row names; for a string key,
    a whole number or a TOML date or time as it is written (``account = 12345`` is
    ``"12345"``, ``time = 90`` is 90 minutes as Slurm reads it)."""
    parser = PARSERS[keys.BY_NAME[key].parse]
    whole = isinstance(value, int) and not isinstance(value, bool)
    if not (takes_text(key) and (whole or isinstance(value, dt.date | dt.time))):
        return parser(key, value, environ)
    try:
        return parser(key, keys.as_written(value), environ)
    except SpecError as exc:  # named bare, as the file has it: launcher = 7, not '7'
        quoted = f"{key} = {keys.as_written(keys.as_written(value))}"
        if not str(exc).startswith(quoted):
            raise
        raise SpecError(f"{key} = {keys.as_written(value)}{str(exc)[len(quoted) :]}") from None


def gpu_types(raw: Mapping[str, Any], kw: dict[str, Any]) -> None:
    """The GPU type a count names (``"h100:8"``), set as ``gpu_type`` (one type per job)."""
    for key in ("gpus_per_node", "gpus"):
        typed = v.parse_gpus(raw[key], key)[0] if key in raw else None
        if typed is None:
            continue
        if kw.get("gpu_type") not in (None, typed):
            raise v.bad("gpu_type", kw["gpu_type"], f"but {key} names {typed!r}")
        kw["gpu_type"] = typed
