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
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from slurmpre import defaults, launchers, reading
from slurmpre.errors import SpecError
from slurmpre.folder import access
from slurmpre.launchers import Launcher
from slurmpre.login import values as v
from slurmpre.login import variables
from slurmpre.login.values import NodeRange

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib


@dataclass(frozen=True)
class JobSpec:
    name: str
    command: tuple[str, ...]
    nodes: NodeRange = NodeRange(1, 1)  # noqa: RUF009 - frozen, so one shared default is safe
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
    restart: str = defaults.RESTART  # otherwise: "requeue", or "successor" (a new job)
    max_restarts: int = defaults.MAX_RESTARTS  # the run gives up at a restart past this
    max_stalled_restarts: int = defaults.MAX_STALLED_RESTARTS  # or after N attempts saving nothing
    resume_arg: str | None = None  # e.g. "--resume-from": the command gets the resume path
    accelerate_config: str | None = None  # `accelerate launch --config_file`, on every attempt
    snapshot: str = "none"  # "git": every attempt runs from a copy made at submit
    snapshot_max_mb: int = defaults.SNAPSHOT_MAX_MB
    file_access: str = "owner"  # who may read what slurmpre creates: "owner" or "group"
    python: str = ""  # the interpreter that has slurmpre on the nodes
    template: str | None = None

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
    name = v.parse_name(raw["name"])
    explicit_user = user
    environ = dict(os.environ if environ is None else environ)
    if explicit_user:
        environ.update(HOME=f"/home/{explicit_user}", USER=explicit_user)
    kw: dict[str, Any] = {"name": name, "command": v.parse_command(raw["command"])}
    for key, value in raw.items():
        if key in ("name", "command"):
            continue
        if key == "nodes":
            kw[key] = v.parse_nodes(value)
        elif key in ("gpus_per_node", "gpus"):
            _, kw[key] = v.parse_gpus(value, key)  # its type: after the loop
        elif key in ("warn_before_end", "safety_margin", "preempt_window", "max_restarts",
                     "max_stalled_restarts", "snapshot_max_mb"):  # fmt: skip
            kw[key] = v.whole(key, value)
        elif key in ("cpus_per_task", "nproc_per_node"):
            kw[key] = None if value in (None, "", "auto") else v.whole(key, value)
        elif key == "poll_interval":
            kw[key] = v.seconds(key, value)
        elif key == "drain_reason":
            kw[key] = v.pattern(key, value)
        elif key == "notice_signal":
            kw[key] = v.signal_name(key, value)
        elif key == "mem":
            kw[key] = v.optional_word(key, value, v.MEM, "must be a size such as 64G or 512M")
        elif key == "time":
            kw[key] = v.time_limit(key, value)
        elif key in ("partition", "account", "qos"):
            kw[key] = v.optional_word(
                key, value, v.WORD, "must be one word of letters, digits, . _ -"
            )
        elif key == "constraint":
            kw[key] = v.optional_word(
                key, value, v.CONSTRAINT, "must be a Slurm feature expression such as preemptible"
            )
        elif key == "array":
            kw[key] = v.array(key, value)
        elif key in ("requeue", "watch", "in_place"):
            kw[key] = v.boolean(key, value)
        elif key in ("checkpoint_dir", "log_dir"):
            kw[key] = v.path(key, value, environ)
        elif key == "launcher":
            try:
                kw[key] = Launcher(value)
            except ValueError:
                raise v.bad(key, value, "must be 'torchrun', 'accelerate' or 'plain'") from None
        elif key == "gpu_type":
            if value in (None, ""):
                continue
            if not isinstance(value, str) or not v.GPU_TYPE.match(value):
                raise v.bad(key, value, "must be a GPU type such as h100 (letters, digits, _.-)")
            kw[key] = value
        elif key == "restart":
            if value not in defaults.RESTARTS:
                raise v.bad(key, value, "must be 'requeue' or 'successor'")
            kw[key] = value
        elif key == "snapshot":
            if value not in defaults.SNAPSHOTS:
                raise v.bad(key, value, "must be 'none' or 'git'")
            kw[key] = value
        elif key == "file_access":
            if not isinstance(value, str) or value not in access.NAMES:
                raise v.bad(key, value, "must be 'owner' or 'group'")
            kw[key] = value
        elif key == "env":
            kw[key] = v.parse_env(value)
        elif key == "setup":
            kw[key] = v.parse_setup(value)
        elif key == "extra_sbatch":
            kw[key] = v.parse_extra_sbatch(value)
        elif key == "resume_arg":
            kw[key] = None if value in (None, "") else v.parse_resume_arg(value)
        elif key == "python":
            kw[key] = v.path(key, value, environ)
        elif key == "accelerate_config":
            kw[key] = None if value in (None, "") else v.accelerate_config(key, value, environ)
        elif key == "template":  # a path key too: relative ones are to the spec's folder
            text = None if value in (None, "") else v.one_line(key, value)
            kw[key] = None if text is None else variables.expand_path(key, text, environ)
    for key in ("gpus_per_node", "gpus"):
        typed = v.parse_gpus(raw[key], key)[0] if key in raw else None
        if typed is None:
            continue
        if kw.get("gpu_type") not in (None, typed):
            raise v.bad("gpu_type", kw["gpu_type"], f"but {key} names {typed!r}")
        kw["gpu_type"] = typed
    spec = JobSpec(**kw)
    if spec.gpus and spec.gpus_per_node:
        raise v.bad(
            "gpus", spec.gpus, "asks for GPUs per job, and gpus_per_node per node: give one"
        )
    if spec.gpu_type is not None and not (spec.gpus_per_node or spec.gpus):
        raise v.bad("gpu_type", spec.gpu_type, "needs gpus_per_node or gpus of 1 or more")
    if spec.accelerate_config and spec.launcher != Launcher.ACCELERATE:
        raise v.bad(
            "accelerate_config",
            spec.accelerate_config,
            f"is read by accelerate launch: set launcher = 'accelerate' "
            f"(launcher is {spec.launcher.value!r})",
        )
    chdir = next((d for d in spec.extra_sbatch if d.startswith("--chdir")), None)
    if spec.snapshot != "none" and chdir is not None:
        raise v.bad(
            "extra_sbatch", chdir, "snapshot = 'git' runs the job from its copy of the code"
        )
    nested = launchers.own(spec.command)
    if nested is not None:
        raise v.bad("command", " ".join(spec.command[:3]), launchers.NESTED[nested])
    if spec.safety_margin >= spec.preempt_window:
        raise v.bad(
            "safety_margin",
            spec.safety_margin,
            f"must be smaller than preempt_window ({spec.preempt_window})",
        )
    if spec.poll_interval >= spec.preempt_window - spec.safety_margin:
        raise v.bad(
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
            raise v.bad("env", base, 'must be a table of NAME = "value"')
        env = {**base, **overrides.pop("env")}
    raw.update(overrides)
    if env is not None:
        raw["env"] = env
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
