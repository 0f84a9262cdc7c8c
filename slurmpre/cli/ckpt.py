"""``slurmpre ckpt ...``: checkpoints in a folder."""

from __future__ import annotations

import click

from slurmpre.cli.common import echoed, folder_arg, json_document, shown
from slurmpre.errors import CheckpointError


@click.group()
def ckpt() -> None:
    """Checkpoints in a folder: the newest complete one, all of them, one checked, pruning."""


@ckpt.command("latest")
@click.argument("folder")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def ckpt_latest(folder: str, as_json: bool) -> None:
    """Print the newest complete checkpoint under FOLDER (exit 1 if there is none)."""
    from slurmpre.folder.checkpoints import latest, summarize

    found = latest(folder_arg(folder))
    if as_json:
        best = found.checkpoint
        click.echo(
            json_document(
                "latest",
                {
                    "folder": str(folder),
                    "checkpoint": None if best is None else best.as_dict(),
                    "passed_over": [s.as_dict() for s in found.skipped],
                    "more_passed_over": found.more,
                },
            )
        )
    else:
        for line in summarize(found):
            click.echo(shown(line), err=True)
    if found.checkpoint is None:
        raise CheckpointError(f"no complete checkpoint under {str(folder)!r}")
    if not as_json:
        click.echo(str(found.checkpoint.path))


@ckpt.command("list")
@click.argument("folder")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--all", "show_all", is_flag=True, help="Also what is not a checkpoint, and why.")
def ckpt_list(folder: str, as_json: bool, show_all: bool) -> None:
    """Every checkpoint under FOLDER, newest first: step, format, complete or not and why."""
    from slurmpre.folder.checkpoints import ignored, list_all

    path = folder_arg(folder)
    found = list_all(path)
    others = ignored(path) if show_all else []
    if as_json:
        out: dict[str, object] = {"checkpoints": [c.as_dict() for c in found]}
        if show_all:
            out["ignored"] = [{"name": i.name, "reason": i.reason} for i in others]
        click.echo(json_document("checkpoints", out))
        return
    if found or others:
        click.echo(f"{'step':>10}  {'state':<10}  {'format':<10}  name  (why)")
    for c in found:
        step = "-" if c.step is None else str(c.step)
        state = "complete" if c.complete else "INCOMPLETE"
        click.echo(
            f"{step:>10}  {state:<10}  {c.format.value:<10}  {shown(c.path.name)}  ({c.reason})"
        )
    for i in others:
        click.echo(f"{'-':>10}  {'ignored':<10}  {'':<10}  {shown(i.name)}  ({i.reason})")


@ckpt.command("verify")
@click.argument("path")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def ckpt_verify(path: str, as_json: bool) -> None:
    """Say whether the checkpoint at PATH is complete, and why (exit 1 if it is not)."""
    from slurmpre.folder.checkpoints import judge

    found = judge(folder_arg(path))
    if as_json:
        click.echo(json_document("verify", found.as_dict()))
    else:
        state = "complete" if found.complete else "INCOMPLETE"
        step = "-" if found.step is None else found.step
        click.echo(f"{state}: {found.where} (step {step}, {found.format.value}): {found.reason}")
    if not found.complete:
        raise CheckpointError(f"{path!r} is not a complete checkpoint: {found.reason}")


@ckpt.command("prune")
@click.argument("folder")
@click.option("--keep", type=int, required=True, help="How many newest complete ones to keep.")
@click.option("--dry-run", is_flag=True, help="Say what would go; remove nothing.")
@click.option(
    "--wait",
    type=float,
    default=60.0,
    show_default=True,
    help="Seconds to wait while a checkpoint is being written.",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def ckpt_prune(folder: str, keep: int, dry_run: bool, wait: float, as_json: bool) -> None:
    """Remove old checkpoints and dead attempts' leftovers from FOLDER, never what a job needs.

    Kept whatever --keep says: the newest complete checkpoint, any a live job
    resumed from, partial ones newer than the newest complete, and everything
    while a checkpoint is being written.
    """
    from slurmpre.login.prune import human, prune
    from slurmpre.slurm.client import default_client

    with echoed(prune.__module__, err=True, prefix="slurmpre: "):
        done = prune(folder_arg(folder), keep, default_client(), dry_run=dry_run, wait=wait)
    if as_json:
        click.echo(
            json_document(
                "prune",
                {
                    "dry_run": done.dry_run,
                    "removed": [e.__dict__ for e in done.removed],
                    "kept": [{"name": e.name, "why": e.why} for e in done.kept],
                    "failed": [f.__dict__ for f in done.failed],
                    "freed_bytes": done.freed,
                },
            )
        )
    else:
        verb = "would remove" if dry_run else "removed"
        for e in done.removed:
            click.echo(f"{verb} {shown(e.name)} ({human(e.size)}): {e.why}")
        for e in done.kept:
            click.echo(f"kept {shown(e.name)}: {e.why}")
        for f in done.failed:
            click.echo(f"could not remove {shown(f.name)} (left as {shown(f.left_as)}): {f.why}")
        freed = "would free" if dry_run else "freed"
        n = len(done.removed)
        click.echo(f"{freed} {human(done.freed)} in {n} {'entry' if n == 1 else 'entries'}")
    if done.failed:
        names = ", ".join(f.name for f in done.failed)
        raise CheckpointError(f"could not remove {len(done.failed)} entries: {names}")
