"""What every command module shares: printing JSON and names, and reading arguments."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import click

from slurmpre import defaults
from slurmpre.errors import SandboxError, SlurmpreError, UsageError


def err(message: str) -> None:
    click.echo(f"slurmpre: error: {message}", err=True)


def shown(text: str) -> str:
    """A name as a terminal should show it: control characters (a newline, an escape
    sequence that would clear the screen) written as escapes, not sent."""
    return text if text.isprintable() else repr(text)[1:-1]


SCHEMA_VERSION = 1  # of every --json's shape (docs/login.md says when it is raised)


def json_document(kind: str, value: dict[str, Any]) -> str:
    """``value`` as the JSON a ``--json`` prints: ``{"schema": "slurmpre/KIND/1", ...}``,
    indented, with what JSON cannot hold (an infinite or NaN number) as null."""
    document = {"schema": f"slurmpre/{kind}/{SCHEMA_VERSION}", **value}
    return json.dumps(_finite(document), indent=2, allow_nan=False)


def _finite(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def complete_jobs(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    """Shell completion of a JOB argument: the ids and names of the jobs you submitted
    (newest first; an array's tasks as ``123_0``), read from your list of jobs only."""
    from click.shell_completion import CompletionItem

    from slurmpre.login import jobs

    try:
        known = jobs.known()
    except SlurmpreError:
        return []
    seen: dict[str, str] = {}
    for e in reversed(known):
        for task in e.tasks() if e.array is not None else []:
            seen.setdefault(task.job, e.name)
        seen.setdefault(e.job, e.name)
        seen.setdefault(e.name, f"newest: job {e.job}")
    return [CompletionItem(v, help=h) for v, h in seen.items() if v.startswith(incomplete)]


def folder_arg(value: str) -> Path:
    if not value.strip():
        raise UsageError("FOLDER is empty: name the checkpoint folder")
    return Path(value)


def sandbox_here() -> Any:
    """The sandbox of this machine that $SLURMPRE_SANDBOX names (0, the default, unless set)."""
    from slurmpre.sandbox.cluster import Sandbox

    return Sandbox.here()


# The commands that find the sandbox's Slurm by themselves (`Sandbox.env`, `Sandbox.use`).
FIND_THEIR_OWN_SLURM = frozenset({"sandbox", "drill", "run"})  # run: the job side's own


def echoed(*modules: str, err: bool = False, prefix: str = "") -> AbstractContextManager[None]:
    """While inside, what ``modules`` (logger names) say on this thread is echoed, a line
    each, ``prefix`` first, on stderr with ``err`` (`slurmpre.lines`)."""
    from slurmpre.lines import sent_to

    return sent_to(lambda line: click.echo(prefix + line, err=err), *modules)


def nodes_run(python: str) -> None:
    """Refuse a ``python`` that the nodes of the sandbox whose Slurm commands are first on
    PATH cannot see (`slurmpre.sandbox.seen.unseen`): asked here, where the command line
    reaches the sandbox, so that the login side never imports it."""
    from slurmpre.sandbox.seen import unseen

    if (why := unseen(python, os.environ.get("PATH", ""))) is not None:
        raise UsageError(why)


def reach_sandbox(ctx: click.Context) -> None:
    """Slurm's commands of the sandbox that is up for this command, from any shell
    (`slurmpre.sandbox.reach`): its shims first on PATH and its slurm.conf, put back as
    they were when the command ends. What someone else could have written is said in
    one line and not followed."""
    from slurmpre.sandbox.reach import needed

    try:
        changes = needed(os.environ)
    except SandboxError as exc:
        click.echo(f"slurmpre: warning: {exc}; running the Slurm on PATH", err=True)
        return
    if not changes:
        return
    before = {name: os.environ.get(name) for name in changes}
    os.environ.update(changes)  # this process's, and the jobs it submits inherit it
    ctx.call_on_close(lambda: _put_back(before))


def _put_back(before: dict[str, str | None]) -> None:
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def prices(command: Callable[..., Any]) -> Callable[..., Any]:
    """The ``--price`` and ``--discount`` options of the commands that show a cost."""
    command = click.option(
        "--discount", type=float, default=defaults.PREEMPTIBLE_DISCOUNT, show_default=True,
        help="Preemptible discount.",
    )(command)  # fmt: skip
    return click.option(
        "--price", type=float, default=defaults.ON_DEMAND_PRICE, show_default=True,
        help="On-demand $/GPU-hour.",
    )(command)  # fmt: skip


def say_err(line: str) -> None:
    click.echo(line, err=True)
