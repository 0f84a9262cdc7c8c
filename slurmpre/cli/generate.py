"""``slurmpre render``, ``submit`` and ``run``: a spec to an sbatch script, to a job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from slurmpre.cli.common import echoed, nodes_run, say_err
from slurmpre.errors import UsageError

_spec_arg = click.argument("spec_file", metavar="SPEC.toml", type=click.Path(path_type=Path))
_set_opt = click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a spec key (repeatable; the command line wins); env.NAME=VALUE sets one.",
)


@click.command("render")
@_spec_arg
@_set_opt
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path))
def render_cmd(spec_file: Path, sets: tuple[str, ...], output: Path | None) -> None:
    """Print the sbatch script for SPEC.toml (or write it to --output)."""
    from slurmpre.login.render import render
    from slurmpre.login.spec import load

    script = render(load(spec_file, sets))
    if output is None:
        click.echo(script, nl=False)
    else:
        try:
            output.write_text(script)
        except OSError as exc:
            raise UsageError(f"cannot write {str(output)!r}: {exc.strerror or exc}") from None


@click.command("submit")
@_spec_arg
@_set_opt
@click.option(
    "--dry-run", is_flag=True, help="Make every check of submit, print the script; queue nothing."
)
@click.option("--test-only", is_flag=True, help="Ask Slurm to validate it (sbatch --test-only).")
@click.option(
    "--force", is_flag=True, help="Submit even while another live job uses the checkpoint folder."
)
@click.option(
    "--resume", is_flag=True, help="Go on from a folder whose last run finished its training."
)
@click.option(
    "--fresh", is_flag=True, help="Move the checkpoint folder aside (dated) and start at step 0."
)
def submit_cmd(
    spec_file: Path,
    sets: tuple[str, ...],
    dry_run: bool,
    test_only: bool,
    force: bool,
    resume: bool,
    fresh: bool,
) -> None:
    """Render SPEC.toml and submit it with sbatch; print the job id."""
    from slurmpre.login import submit as submitting
    from slurmpre.login.spec import load
    from slurmpre.slurm.client import default_client

    spec = load(spec_file, sets)
    nodes_run(spec.python)
    client = default_client()
    with echoed(submitting.__name__, err=True):
        if dry_run:  # every check of submit, then the script instead of the queue
            script = submitting.dry_run(spec, client, force=force, resume=resume, fresh=fresh)
            click.echo(script, nl=False)
            return
        if test_only:
            verdict = submitting.test_only(spec, client, force=force, resume=resume, fresh=fresh)
            click.echo(verdict)
            return
        done = submitting.submit(spec, client, force=force, resume=resume, fresh=fresh)
    click.echo(done.job_id)
    click.echo(f"log: {done.log}  script: {done.script_copy}", err=True)


@click.command(
    "run",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
    add_help_option=False,
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def run_cmd(args: tuple[str, ...]) -> None:
    """Inside a job: resume from the newest complete checkpoint and launch (see --help).

    `main` hands `slurmpre run ...` straight to the wrapper, untouched by click
    (which would eat the `--`); the sbatch template calls the same wrapper as
    `python -m slurmpre.job run`, which starts without importing click.
    """
    from slurmpre.job.start.entry import main as job

    raise SystemExit(job(["run", *args]))


@click.command("sweep")
@click.argument(
    "spec_files", metavar="SPEC.toml...", nargs=-1, required=True, type=click.Path(path_type=Path)
)
@click.option(
    "--grid",
    "axes",
    multiple=True,
    metavar="KEY=V1,V2,...",
    help="Run SPEC.toml once per value (repeatable: every combination); env.NAME=... too.",
)
@_set_opt
@click.option("--name", help="The array's name (else the specs' common name).")
@click.option("--max-running", type=int, help="At most N tasks at a time.")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Check each job as submit would, print its script; queue nothing.",
)
@click.option("--force", is_flag=True, help="Submit even while a live job uses a folder.")
@click.option("--resume", is_flag=True, help="Go on from folders whose last run finished.")
@click.option("--fresh", is_flag=True, help="Move earlier folders aside and start at step 0.")
def sweep_cmd(
    spec_files: tuple[Path, ...],
    axes: tuple[str, ...],
    sets: tuple[str, ...],
    name: str | None,
    max_running: int | None,
    dry_run: bool,
    force: bool,
    resume: bool,
    fresh: bool,
) -> None:
    """Submit many specs at once, as one Slurm array where they fit: several SPEC.toml,
    or one with --grid. Specs differing only in command, env and name are the tasks of
    one array (task i in <checkpoint_dir>/task-i); the rest are jobs of their own.
    Prints each job's id (an array's stands for its tasks: 123 all, 123_0 one)."""
    from slurmpre.login import submit as submitting
    from slurmpre.login import sweep as sweeps
    from slurmpre.login.launch import plan_sweep
    from slurmpre.login.spec import parse_sets
    from slurmpre.slurm.client import default_client

    overrides = parse_sets(sets)
    grid = dict(sweeps.parse_axis(a) for a in axes) if axes else None
    if grid is not None and len(spec_files) != 1:
        raise UsageError(f"--grid sweeps one spec, and {len(spec_files)} were given")
    specs: Path | list[Path] = spec_files[0] if grid is not None else list(spec_files)
    groups = plan_sweep(specs, grid, name=name, max_running=max_running, **overrides)

    def check(spec: Any, client: Any, **options: Any) -> None:
        nodes_run(spec.python)
        submitting.check(spec, client, **options)

    if dry_run:  # every job checked as submit checks it, then the scripts
        client = default_client()
        scripts = []
        with echoed(submitting.__name__, err=True):
            for g in groups:
                nodes_run(g.spec.python)
                scripts.append(
                    submitting.dry_run(
                        g.spec, client, force=force, resume=resume, fresh=fresh, tasks=g.tasks
                    )
                )
        click.echo("".join(scripts), nl=False)
        return

    with echoed(submitting.__name__, err=True):
        done = sweeps.submit_groups(
            groups, default_client(), submit_one=submitting.submit, check_one=check,
            force=force, resume=resume, fresh=fresh,
        )  # fmt: skip
    for q in done:
        click.echo(q.job_id)
        if q.group.tasks:
            say_err(f"array job {q.job_id} ({q.group.spec.name}): {len(q.group.tasks)} tasks")
            for i, task in enumerate(q.group.tasks):
                say_err(f"  {q.job_id}_{i}  {task.label}")
        else:
            say_err(f"job {q.job_id} ({q.group.spec.name})")
