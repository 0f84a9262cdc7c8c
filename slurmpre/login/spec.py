"""A job spec: one TOML file per job, validated into a frozen `JobSpec`.

Every key can also be set on the command line (``--set key=value``, the
command line wins). Every error names the key and the bad value, and is a
`SpecError` (exit code 2).
"""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from slurmpre import keys, launchers, reading
from slurmpre.errors import SpecError
from slurmpre.launchers import Launcher
from slurmpre.login import parsers
from slurmpre.login import values as v

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib


@dataclass(frozen=True, kw_only=True)
class JobSpec(keys.CodeKeys, keys.RunKeys, keys.WatchKeys, keys.LaunchKeys, keys.JobKeys):
    """A checked spec: its fields are the table's keys (`slurmpre.keys`), in its order
    (its parts' fields, each defined once there), with their defaults."""

    @property
    def is_array(self) -> bool:
        return self.array is not None


KEYS = tuple(f.name for f in fields(JobSpec))


def validate(
    raw: Mapping[str, Any],
    *,
    user: str | None = None,
    python: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> JobSpec:
    """A raw mapping (from TOML and ``--set``) -> a checked JobSpec. Path keys expand
    ``~`` and ``$VAR`` from ``environ`` (this process's environment; with ``user``, that
    user's ``$HOME`` and ``$USER``)."""
    _known(raw)
    environ = dict(os.environ if environ is None else environ)
    if user:
        environ.update(HOME=f"/home/{user}", USER=user)
    kw = {key: parsers.parse(key, value, environ) for key, value in raw.items()}
    parsers.gpu_types(raw, kw)
    spec = JobSpec(**kw)
    _together(spec)
    if not spec.checkpoint_dir:
        # $HOME is on the shared volume (/home on the provider's clusters); a user given
        # explicitly (tests, another account) gets /home/<user>.
        home = f"/home/{user}" if user else str(Path.home())
        spec = replace(spec, checkpoint_dir=f"{home}/checkpoints/{spec.name}")
    if not spec.log_dir:
        spec = replace(spec, log_dir=f"{spec.checkpoint_dir}/logs")
    if not spec.python:
        spec = replace(spec, python=python or sys.executable)
    return spec


def _known(raw: Mapping[str, Any]) -> None:
    """Every key is one of the table's, and the two without a default are there."""
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


def _names_chdir(line: str) -> bool:
    """Whether sbatch could read the `extra_sbatch` line (one option, ``--name[=value]``)
    as ``--chdir``: its name or a prefix of it."""
    name = line.removeprefix("--").partition("=")[0]
    return line.startswith("--") and bool(name) and "chdir".startswith(name)


def _together(spec: JobSpec) -> None:
    """What keys must be together: each refusal names the key to change."""
    margin, window = spec.safety_margin, spec.preempt_window
    chdir = next((d for d in spec.extra_sbatch if _names_chdir(d)), None)
    nested = launchers.own(spec.command)
    refusals = [
        ("gpus", spec.gpus, spec.gpus and spec.gpus_per_node,
         "asks for GPUs per job, and gpus_per_node per node: give one"),
        ("gpu_type", spec.gpu_type, spec.gpu_type is not None and not (spec.gpus_per_node or
         spec.gpus), "needs gpus_per_node or gpus of 1 or more"),
        ("accelerate_config", spec.accelerate_config,
         spec.accelerate_config and spec.launcher != Launcher.ACCELERATE,
         f"is read by accelerate launch: set launcher = 'accelerate' (launcher is "
         f"{spec.launcher.value!r})"),
        ("extra_sbatch", chdir, spec.snapshot != "none" and chdir is not None,
         "snapshot = 'git' runs the job from its copy of the code"),
        ("command", " ".join(spec.command[:3]), nested is not None,
         launchers.NESTED[nested] if nested is not None else ""),
        ("safety_margin", margin, margin >= window,
         f"must be smaller than preempt_window ({window})"),
        ("poll_interval", spec.poll_interval, spec.poll_interval >= window - margin,
         f"must be shorter than preempt_window - safety_margin ({window - margin} s), or a "
         "drain is seen too late"),
        *[("spare_nodes", spec.spare_nodes, spec.spare_nodes and not on,
           f"a spare takes a drained node's place inside the allocation: it needs {key} = true")
          for key, on in (("in_place", spec.in_place), ("watch", spec.watch))],
        ("deadline", spec.deadline, spec.deadline and spec.total_steps is None,
         "needs total_steps: progress toward the deadline is steps against it"),
        *[(key, getattr(spec, key), getattr(spec, key) is not None and spec.restart != "successor",
           "moves the run to standard nodes at a hand-over: it needs restart = 'successor' "
           f"(restart is {spec.restart!r})")
          for key in ("deadline", "fallback_after", "max_wait")],
    ]  # fmt: skip
    for key, value, wrong, why in refusals:
        if wrong:
            raise v.bad(key, value, why)


def parse_sets(items: Sequence[str]) -> dict[str, Any]:
    """``["nodes=2-4", "env.SEED=1"]`` -> {"nodes": "2-4", "env": {"SEED": "1"}}.

    A value is read as TOML when it parses (``requeue=false``, ``nodes=4``),
    else taken as a plain string; a key whose value is a string takes it as written
    (``time=12:00:00``, ``account=12345``), or as a TOML string when it is quoted.
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
        elif parsers.takes_text(key):
            out[key] = value if isinstance(value, str) else text
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
    if "env" in overrides:
        base = raw.get("env", {})
        given = overrides.pop("env")  # set again last, below
        if not isinstance(base, Mapping):
            raise v.bad("env", base, 'must be a table of NAME = "value"')
        if not isinstance(given, Mapping):  # --set env=3: give each as env.NAME=value
            raise v.bad(
                "env", given, 'must be a table of NAME = "value"; set one as env.NAME=value'
            )
        overrides["env"] = {**base, **given}
    raw.update(overrides)
    if "name" not in raw:
        raw["name"] = path.stem
    return from_raw(raw, path, user=user, python=python)


def from_raw(
    raw: Mapping[str, Any],
    path: Path | None = None,
    *,
    user: str | None = None,
    python: str | None = None,
) -> JobSpec:
    """A spec from its mapping (read from ``path``, whose folder a relative template is
    found in; without one, the current folder's)."""
    spec = validate(raw, user=user, python=python)
    if spec.template is not None and not spec.template.startswith("/"):
        base = Path.cwd() if path is None else path.parent
        spec = replace(spec, template=str((base / spec.template).resolve()))
    return spec
