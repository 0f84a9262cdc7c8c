"""Queue jobs from Python: ``slurmpre.submit`` and ``slurmpre.sweep``, as `slurmpre
submit` and `slurmpre sweep` do; each returns the `Job` handles of what it queued
(``submit(..., dry_run=True)``: what it would queue, queueing nothing).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, overload

from slurmpre import arguments
from slurmpre.errors import UsageError
from slurmpre.login.handle import Job
from slurmpre.slurm.client import SlurmClient, default_client


@dataclass(frozen=True)
class DryRun:
    """What ``submit(..., dry_run=True)`` would queue, every check of `submit` passed (one
    that fails raises the error `submit` would): the spec as checked, and its script."""

    spec: Any  # JobSpec
    script: str


@overload
def submit(
    spec: str | Path | Mapping[str, Any],
    *,
    force: bool = ...,
    resume: bool = ...,
    fresh: bool = ...,
    client: SlurmClient | None = ...,
    say: Callable[[str], None] | None = ...,
    dry_run: Literal[False] = ...,
    **overrides: Any,
) -> Job: ...
@overload
def submit(
    spec: str | Path | Mapping[str, Any],
    *,
    force: bool = ...,
    resume: bool = ...,
    fresh: bool = ...,
    client: SlurmClient | None = ...,
    say: Callable[[str], None] | None = ...,
    dry_run: Literal[True],
    **overrides: Any,
) -> DryRun: ...
def submit(
    spec: str | Path | Mapping[str, Any],
    *,
    force: bool = False,
    resume: bool = False,
    fresh: bool = False,
    client: SlurmClient | None = None,
    say: Callable[[str], None] | None = None,
    dry_run: bool = False,
    **overrides: Any,
) -> Job | DryRun:
    """Queue ``spec`` (a TOML file's path, or the spec as a mapping) with ``overrides``
    on top (``nodes="1-2"``, ``env={"SEED": "1"}``, merged into the spec's env), as
    `slurmpre submit` does; the `Job`. With ``dry_run``, as `submit --dry-run`: every
    check, and the script, in a `DryRun`; nothing is queued, no folder made. ``say``
    hears what `submit` tells (what the job resumes from), a line at a time."""
    from slurmpre.lines import sent_to
    from slurmpre.login import spec as specs
    from slurmpre.login.submit import dry_run as rehearse
    from slurmpre.login.submit import submit as queue

    for flag, value in (("force", force), ("resume", resume), ("fresh", fresh)):
        arguments.flag(flag, value)
    arguments.flag("dry_run", dry_run)
    raw, where = _raw(spec)
    if "env" in overrides and isinstance(raw.get("env"), Mapping):
        overrides = {**overrides, "env": {**raw["env"], **overrides["env"]}}
    raw.update(overrides)
    loaded = specs.from_raw(raw, where)
    client = client or default_client()
    with sent_to(say, queue.__module__):
        if dry_run:  # every check of submit, touching nothing: called, not copied
            return DryRun(loaded, rehearse(loaded, client, force=force, resume=resume, fresh=fresh))
        done = queue(loaded, client, force=force, resume=resume, fresh=fresh)
    return Job(done.job_id, loaded.name, Path(loaded.checkpoint_dir), Path(loaded.log_dir), client)


def _raw(spec: str | Path | Mapping[str, Any]) -> tuple[dict[str, Any], Path | None]:
    from slurmpre.login import spec as specs

    arguments.expect("spec", spec, (*arguments.PATH, Mapping), "a spec file's path or a mapping")
    if isinstance(spec, Mapping):
        return dict(spec), None
    where = Path(spec)
    raw = specs.read(where)
    raw.setdefault("name", where.stem)
    return raw, where


def plan_sweep(
    specs: str | Path | Mapping[str, Any] | Sequence[str | Path | Mapping[str, Any]],
    grid: Mapping[str, Sequence[Any]] | None = None,
    *,
    name: str | None = None,
    max_running: int | None = None,
    **overrides: Any,
) -> list[Any]:
    """The jobs a `sweep` would submit (`slurmpre.login.sweep.Group`s), submitting none."""
    from slurmpre.login import spec as spec_
    from slurmpre.login import sweep as sweeps

    arguments.expect("name", name, str, "the sweep's name", optional=True)
    if grid is not None:
        if not isinstance(specs, str | Path | Mapping):
            raise UsageError("a grid sweeps one spec: give one spec with grid=")
        base, where = _raw(specs)
        points = sweeps.grid(grid)
        raws = [(sweeps.apply(base, {**overrides, **p}), where) for p in points]
        labels = [sweeps.label(p) for p in points]
    else:
        if isinstance(specs, str | Path | Mapping):
            raise UsageError("a sweep is a list of specs, or one spec with a grid")
        raws = []
        for one in specs:
            raw, where = _raw(one)
            raws.append((sweeps.apply(raw, overrides), where))
        labels = [str(raw.get("name", "")) for raw, _ in raws]
    loaded = [spec_.from_raw(raw, where) for raw, where in raws]
    return sweeps.group(loaded, labels, name=name, max_running=max_running)


def sweep(
    specs: str | Path | Mapping[str, Any] | Sequence[str | Path | Mapping[str, Any]],
    grid: Mapping[str, Sequence[Any]] | None = None,
    *,
    name: str | None = None,
    max_running: int | None = None,
    force: bool = False,
    resume: bool = False,
    fresh: bool = False,
    client: SlurmClient | None = None,
    say: Callable[[str], None] | None = None,
    **overrides: Any,
) -> list[Job]:
    """Queue many specs at once: a list of specs, or one spec and a ``grid`` over its keys
    (``{"env.LR": ["0.1", "0.01"], "env.SEED": ["1", "2"]}``), with ``overrides`` on
    every one. Those that differ only in command, env and name run as one Slurm array
    (`slurmpre.login.sweep`; at most ``max_running`` tasks at a time); the rest each as
    their own. The Jobs, in order: an array's stands for its tasks (`Job.tasks`).
    ``say``: as `submit`'s."""
    from slurmpre.lines import sent_to
    from slurmpre.login import sweep as sweeps
    from slurmpre.login.submit import check
    from slurmpre.login.submit import submit as queue

    for flag, value in (("force", force), ("resume", resume), ("fresh", fresh)):
        arguments.flag(flag, value)
    groups = plan_sweep(specs, grid, name=name, max_running=max_running, **overrides)
    client = client or default_client()
    with sent_to(say, queue.__module__):
        done = sweeps.submit_groups(
            groups, client, submit_one=queue, check_one=check, force=force, resume=resume,
            fresh=fresh,
        )  # fmt: skip
    return [
        Job(
            q.job_id,
            q.group.spec.name,
            Path(q.group.spec.checkpoint_dir),
            Path(q.group.spec.log_dir),
            client,
            q.group.spec.array,
        )
        for q in done
    ]
