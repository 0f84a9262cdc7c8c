"""The command line: one module per command group, assembled here; `main` is the one
place an error becomes a message and an exit code.
"""

from __future__ import annotations

import errno
import logging
import os
import sys
import traceback
from collections.abc import Sequence

import click

from slurmpre._version import __version__
from slurmpre.cli import capacity, ckpt, drill, generate, jobs, sandbox
from slurmpre.cli.common import FIND_THEIR_OWN_SLURM, err, reach_sandbox
from slurmpre.errors import SlurmpreError, UsageError
from slurmpre.login.values import NAME_MAX

EXIT_USAGE = UsageError.exit_code
EXIT_UNEXPECTED = 3
EXIT_INTERRUPTED = 130


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="slurmpre")
@click.option("--debug", is_flag=True, help="Log every command run and show tracebacks.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Run ML jobs on preemptible Slurm nodes and lose no work when a node is taken back."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    from slurmpre.login import progress

    # The login side's waits are shown (a line, or a spinner) for this command only: a
    # program that runs the CLI in-process (click's test runner) keeps its own setting.
    before = progress.STREAM
    progress.STREAM = sys.stderr
    ctx.call_on_close(lambda: setattr(progress, "STREAM", before))
    if debug:
        logging.basicConfig(level=logging.DEBUG, format="slurmpre: %(name)s: %(message)s")
    if ctx.invoked_subcommand not in FIND_THEIR_OWN_SLURM:
        reach_sandbox(ctx)  # the sandbox that is up, from the shell that brought it up


for command in (
    sandbox.sandbox,
    generate.render_cmd,
    generate.submit_cmd,
    generate.sweep_cmd,
    generate.run_cmd,
    ckpt.ckpt,
    jobs.status,
    jobs.logs,
    jobs.cancel,
    jobs.wait,
    capacity.nodes,
    capacity.plan,
    drill.drill,
):
    cli.add_command(command)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["run"]:
        from slurmpre.job.start.entry import main as job

        return job(args)
    # --debug is the group's, but may come after the subcommand too (up to a "--").
    cut = args.index("--") if "--" in args else len(args)
    debug = "--debug" in args[:cut]
    if debug:
        args = ["--debug", *[a for a in args[:cut] if a != "--debug"], *args[cut:]]
    try:
        cli.main(args=args, prog_name="slurmpre", standalone_mode=False)
    except SlurmpreError as exc:
        err(str(exc))
        if debug:
            traceback.print_exc()
        return exc.exit_code
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("slurmpre: interrupted", err=True)
        return EXIT_INTERRUPTED
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 0
    except Exception as exc:  # noqa: BLE001 - the one place unexpected errors become exit 3
        if isinstance(exc, OSError) and exc.errno == errno.ENAMETOOLONG:
            # A path the user gave, longer than the file system holds: bad input.
            err(f"{exc.filename!r}: {exc.strerror} (a name holds {NAME_MAX} bytes at most)")
            return EXIT_USAGE
        if isinstance(exc, PermissionError) and exc.filename:
            # A path the user gave (or one under it) that this user may not reach.
            err(f"{exc.filename!r}: {exc.strerror} (uid {os.getuid()} may not reach it)")
            return EXIT_USAGE
        err(f"unexpected {type(exc).__name__}: {exc}")
        if debug:
            traceback.print_exc()
        else:
            click.echo("slurmpre: run again with --debug for the traceback", err=True)
        return EXIT_UNEXPECTED
    return 0
