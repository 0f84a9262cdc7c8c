"""``slurmpre render``, ``submit`` and ``run``: a spec to an sbatch script, to a job."""

from __future__ import annotations

from pathlib import Path

import click

from slurmpre.errors import UsageError

# -- render / submit -----------------------------------------------------------
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
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None)
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
@click.option("--dry-run", is_flag=True, help="Print the script; submit nothing.")
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
    from slurmpre.login.render import render
    from slurmpre.login.spec import load
    from slurmpre.login.submit import submit
    from slurmpre.login.submit import test_only as sbatch_test_only
    from slurmpre.slurm.client import default_client

    spec = load(spec_file, sets)
    if dry_run:
        click.echo(render(spec), nl=False)
        return
    if test_only:
        click.echo(sbatch_test_only(spec, default_client()))
        return
    say = lambda line: click.echo(line, err=True)  # noqa: E731
    done = submit(spec, default_client(), force=force, resume=resume, fresh=fresh, say=say)
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
    from slurmpre.job.entry import main as job

    raise SystemExit(job(["run", *args]))
