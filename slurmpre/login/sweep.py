"""Sweeps: many specs at once, as one Slurm array wherever they fit (docs/login.md,
``slurmpre sweep``): specs that differ only in ``command``, ``env`` and ``name`` share one
script, which picks each task's by ``$SLURM_ARRAY_TASK_ID``; the others each run as their
own group.
"""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from slurmpre.errors import SlurmpreError, SpecError
from slurmpre.keys import as_written
from slurmpre.slurm.client import SlurmClient

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib


@dataclass(frozen=True)
class Task:
    """One task of a sweep's array: what it runs, with what environment on top of the
    spec's, and how the sweep names it (its overrides, or its spec's name)."""

    label: str
    command: tuple[str, ...]
    env: Mapping[str, str]


@dataclass(frozen=True)
class Group:
    """Specs submitted as one job: an array of ``tasks`` (from two tasks on), else the
    one ``spec`` as it is."""

    spec: Any  # JobSpec: the array's (its name, folders and range), or the lone spec
    tasks: tuple[Task, ...] = ()


# The most specs one sweep submits: each is a spec to check and a task in an array (a
# cluster's MaxArraySize is 1001 unless raised). A grid of millions is refused before it
# is made, not by running out of memory.
MAX_SPECS = 10_000


def grid(axes: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """``{"env.LR": [a, b], "nodes": [1, 2]}`` -> the overrides of each point of the grid,
    the last key varying fastest."""
    if not isinstance(axes, Mapping) or not axes:
        raise SpecError(f"grid = {axes!r}: give at least one key and a list of its values")
    points = 1
    for key, values in axes.items():
        if not isinstance(key, str) or not key:
            raise SpecError(f"grid key {key!r}: must be a spec key such as 'env.LR'")
        if isinstance(values, str | bytes) or not isinstance(values, Sequence) or not values:
            raise SpecError(f"grid {key}: give a list of one value or more (got {values!r})")
        for value in values:
            _check_value(key, value)
        points *= len(values)
        if points > MAX_SPECS:
            sizes = " x ".join(str(len(v)) for v in axes.values())
            raise SpecError(
                f"grid of {sizes} points: more than the {MAX_SPECS} specs a sweep submits"
            )
    keys = list(axes)
    return [dict(zip(keys, point, strict=True)) for point in itertools.product(*axes.values())]


def _check_value(key: str, value: Any) -> None:
    """A grid's value is what a spec holds: text, a number, true/false, or a list or table
    of those (None is no value: it became the text "None")."""
    if isinstance(value, str | int | float | bool):
        return
    if isinstance(value, list | tuple):
        for v in value:
            _check_value(key, v)
        return
    if isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str):
                raise SpecError(f"grid {key}: {k!r} is not a name")
            _check_value(key, v)
        return
    raise SpecError(f"grid {key}: {value!r} is not a value a spec holds (text, number, list)")


def parse_axis(item: str) -> tuple[str, list[Any]]:
    """``--grid env.LR=1e-5,3e-4`` -> ("env.LR", ["1e-5", "3e-4"]); a TOML list
    (``nodes=[1, 2]``, ``command=["a b", "c d"]``) when a value holds a comma. A variable
    (``env.NAME``) is text, exported as written: ``1e-5`` stays ``1e-5`` (TOML would
    read a float, exported ``1e-05``); a quoted TOML string gives its text."""
    key, sep, text = item.partition("=")
    key = key.strip()
    if not sep or not key or not text.strip():
        raise SpecError(f"--grid {item!r}: expected key=value1,value2,...")
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        value = None
    written = key.startswith("env.")
    if isinstance(value, list):
        values = _listed(text, value) if written else value
    else:
        values = [_scalar(p, written) for p in text.split(",")]
    if not values:
        raise SpecError(f"--grid {item!r}: no values")
    return key, values


def _scalar(text: str, written: bool) -> Any:
    try:
        value = tomllib.loads(f"v = {text.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        return text.strip()
    return text.strip() if written and not isinstance(value, str) else value


def _listed(text: str, values: list[Any]) -> list[Any]:
    """A TOML list of a variable's values, each as written: a list of numbers and
    true/false (none holds a comma or a quote) is its text split at the commas; one
    with text or tables in it is TOML's."""
    if any(isinstance(v, str | list | dict) for v in values):
        return values
    inside = text.strip()[1:-1]
    return [part.strip() for part in inside.split(",") if part.strip()]


def label(overrides: Mapping[str, Any]) -> str:
    """How a task is named in `status`: its overrides, ``env.LR=0.1 env.SEED=1``."""
    return " ".join(f"{k}={_shown(v)}" for k, v in overrides.items())


def _shown(value: Any) -> str:
    if isinstance(value, list | tuple):
        return "[" + ", ".join(map(str, value)) + "]"
    return str(value)


def apply(raw: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """A spec's mapping with ``overrides`` on top: ``env.NAME`` keys, and an ``env`` table,
    merge into its env (the override wins)."""
    out = dict(raw)
    env = dict(out.get("env") or {})
    touched = False
    for key, value in overrides.items():
        if key.startswith("env."):
            env[key[4:]] = value if isinstance(value, str) else _shown(value)
            touched = True
        elif key == "env":
            if not isinstance(value, Mapping):
                raise SpecError(f"env = {as_written(value)}: must be a table of NAME = value")
            env.update(value)
            touched = True
        else:
            out[key] = value
    if touched:
        out["env"] = env
    return out


def _default_dirs(spec: Any) -> bool:
    """Whether ``spec``'s folders are the ones its name gives it (so an array of it and
    its siblings takes the array's own)."""
    home = str(Path.home())
    derived = f"{home}/checkpoints/{spec.name}"
    return bool(spec.checkpoint_dir == derived and spec.log_dir == f"{derived}/logs")


def _shared(spec: Any) -> Any:
    """What must be equal for specs to share an array's script."""
    dirs = ("", "") if _default_dirs(spec) else (spec.checkpoint_dir, spec.log_dir)
    return replace(spec, name="", command=("-",), env={}, checkpoint_dir=dirs[0], log_dir=dirs[1])


def group(
    specs: Sequence[Any],
    labels: Sequence[str],
    *,
    name: str | None = None,
    max_running: int | None = None,
) -> list[Group]:
    """Specs -> the jobs that run them: an array wherever several share all but their
    command, env and name; order kept (by each group's first spec)."""
    if not specs:
        raise SpecError("a sweep needs at least one spec")
    if len(specs) > MAX_SPECS:
        raise SpecError(f"a sweep of {len(specs)} specs: more than the {MAX_SPECS} it submits")
    if max_running is not None and (
        isinstance(max_running, bool) or not isinstance(max_running, int) or max_running < 1
    ):
        raise SpecError(
            f"max_running = {as_written(max_running)}: a whole number of tasks at a time, 1 or more"
        )
    for spec in specs:
        if spec.is_array:
            raise SpecError(
                f"array = {as_written(spec.array)} in spec {as_written(spec.name)}: a sweep makes "
                "the array itself (its tasks are the specs); leave array out"
            )
    buckets: list[tuple[Any, list[int]]] = []  # specs are not hashable (env is a dict)
    for i, spec in enumerate(specs):
        shared = _shared(spec)
        found = next((members for key, members in buckets if key == shared), None)
        if found is None:
            buckets.append((shared, [i]))
        else:
            found.append(i)
    out = [
        _array([specs[i] for i in members], [labels[i] for i in members], name, max_running)
        for _, members in buckets
    ]
    # Two jobs of one name would share a checkpoint folder: the later ones get -2, -3...
    taken: set[str] = set()
    for n, g in enumerate(out):
        title, k = g.spec.name, 1
        while title in taken:
            k += 1
            title = f"{g.spec.name}-{k}"
        taken.add(title)
        if title != g.spec.name:
            out[n] = replace(g, spec=_renamed(g.spec, title))
    return out


def _array(
    members: Sequence[Any], labels: Sequence[str], name: str | None, max_running: int | None
) -> Group:
    """The job of specs that share all but command, env and name: one spec alone, else
    an array whose tasks each set their command and what of their env is their own."""
    if len(members) == 1:
        return Group(members[0])
    first = members[0]
    limit = f"%{max_running}" if max_running else ""
    # The environment every task shares stays the spec's; each task sets the rest.
    common = {k: v for k, v in first.env.items() if all(m.env.get(k) == v for m in members)}
    array_spec = replace(first, env=common, array=f"0-{len(members) - 1}{limit}")
    array_spec = _renamed(array_spec, _array_name(name, [m.name for m in members]))
    tasks = tuple(
        Task(label, m.command, {k: v for k, v in m.env.items() if common.get(k) != v})
        for m, label in zip(members, labels, strict=True)
    )
    return Group(array_spec, tasks)


def _renamed(spec: Any, title: str) -> Any:
    """``spec`` named ``title``, its folders too when its name gave them."""
    from slurmpre.login.values import parse_name

    if title == spec.name:
        return spec
    derived = _default_dirs(spec)
    spec = replace(spec, name=parse_name(title))
    if derived:
        folder = f"{Path.home()}/checkpoints/{spec.name}"
        spec = replace(spec, checkpoint_dir=folder, log_dir=f"{folder}/logs")
    return spec


def _array_name(given: str | None, names: list[str]) -> str:
    """The array's name: the one given, else the tasks' common name, else their common
    start, else the first's with ``-sweep``."""
    if given:
        return given
    if len(set(names)) == 1:
        return names[0]
    common = os.path.commonprefix(names).rstrip("-_.")  # noqa: RUF071 - names, not paths
    return common or f"{names[0]}-sweep"


@dataclass(frozen=True)
class Queued:
    """A group as submitted: its Slurm job, and the labels of its tasks (none: one job)."""

    job_id: str
    group: Group


def submit_groups(
    groups: Sequence[Group], client: SlurmClient, *, submit_one: Any, check_one: Any, **options: Any
) -> list[Queued]:
    """Submit every group or none: each is checked first (``check_one``: every refusal
    `submit` can make, and Slurm's verdict with ``--test-only``), then each is submitted
    (``submit_one``: an array with its tasks' commands and environments in its script, or
    the lone spec). One Slurm still refuses after others were queued has them cancelled,
    and the error says so: half a sweep is never left in the queue."""
    for g in groups:
        check_one(g.spec, client, tasks=g.tasks, **options)
    out: list[Queued] = []
    for g in groups:
        try:
            done = submit_one(g.spec, client, tasks=g.tasks, **options)
        except SlurmpreError as exc:
            if not out:
                raise
            undone = _cancel_all(client, [q.job_id for q in out])
            raise type(exc)(f"{exc} ({undone})") from None
        out.append(Queued(done.job_id, g))
    return out


def _cancel_all(client: SlurmClient, job_ids: list[str]) -> str:
    """Cancel what this sweep queued; what was done, in words for the error."""
    failed = []
    for job_id in job_ids:
        try:
            client.cancel(job_id)
        except SlurmpreError:
            failed.append(job_id)
    done = ", ".join(j for j in job_ids if j not in failed)
    said = f"this sweep's jobs already queued were cancelled: {done}" if done else ""
    if failed:
        said += ("; " if said else "") + f"could not cancel {', '.join(failed)}: cancel them"
    return said
