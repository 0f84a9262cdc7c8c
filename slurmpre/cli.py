"""The command line: parse arguments, call the core, print. Nothing else lives here.

Errors are turned into one message and an exit code in exactly one place,
`main`: a slurmpre error exits 1 (2 for bad input), Ctrl-C 130, and anything
unexpected 3, with its traceback only under ``--debug``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from slurmpre import __version__, defaults
from slurmpre.errors import SlurmpreError, UsageError

EXIT_UNEXPECTED = 3
EXIT_INTERRUPTED = 130


def _err(message: str) -> None:
    click.echo(f"slurmpre: error: {message}", err=True)


def _shown(text: str) -> str:
    """A name as a terminal should show it: control characters (a newline, an escape
    sequence that would clear the screen) written as escapes, not sent."""
    return text if text.isprintable() else repr(text)[1:-1]


def _json(value: object) -> str:
    """Indented JSON, with what JSON cannot hold (an infinite or NaN number) as null."""
    return json.dumps(_finite(value), indent=2, allow_nan=False)


def _finite(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="slurmpre")
@click.option("--debug", is_flag=True, help="Log every command run and show tracebacks.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Run ML jobs on preemptible Slurm nodes and lose no work when a node is taken back."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    if debug:
        logging.basicConfig(level=logging.DEBUG, format="slurmpre: %(name)s: %(message)s")


# -- sandbox -----------------------------------------------------------------
@cli.group()
def sandbox() -> None:
    """A real Slurm cluster on this machine, for tests and rehearsals."""


def _sandbox() -> Any:
    from slurmpre.sandbox.cluster import DEFAULT_STATE_DIR, Sandbox

    return Sandbox(Path(os.environ.get("SLURMPRE_SANDBOX_DIR", DEFAULT_STATE_DIR)))


@sandbox.command("up")
@click.option("--nodes", default=3, show_default=True, help="Number of nodes.")
@click.option(
    "--preemptible", default=2, show_default=True, help="How many of them carry `preemptible`."
)
@click.option(
    "--stock-timings",
    is_flag=True,
    help="Slurm's default timeouts and requeue delay, instead of the fast test settings.",
)
@click.option(
    "--tracking",
    type=click.Choice(["auto", "cgroup", "pgid"]),
    default="auto",
    show_default=True,
    help="proctrack/cgroup with task/affinity,task/cgroup as on GPU clusters (auto: where the "
    "host mounts cgroup v1), or proctrack/pgid with task/affinity.",
)
@click.option(
    "--slurm",
    metavar="RELEASE",
    default=None,
    help="Slurm release: 22.05, 24.11 or 26.05 (default: the host's packages). Another "
    "release than the host's runs from a Debian root made with debootstrap, cached.",
)
@click.option("--timeout", default=60.0, show_default=True, help="Seconds to wait for the nodes.")
def sandbox_up(
    nodes: int,
    preemptible: int,
    stock_timings: bool,
    tracking: str,
    slurm: str | None,
    timeout: float,
) -> None:
    """Install (if needed) and start munge, slurmctld and one slurmd per node."""
    box = _sandbox()
    box.up(
        nodes,
        preemptible,
        stock_timings=stock_timings,
        tracking=tracking,
        slurm=slurm,
        timeout=timeout,
        say=click.echo,
    )
    if box.root is not None:
        click.echo(
            f"Slurm's commands for this sandbox run in {box.root.path}: "
            f"export PATH={box.root.shims}:$PATH"
        )


@sandbox.command("fetch")
@click.option(
    "--slurm",
    "releases",
    metavar="RELEASE",
    multiple=True,
    required=True,
    help="Slurm release: 22.05, 24.11 or 26.05; give it once per release.",
)
def sandbox_fetch(releases: tuple[str, ...]) -> None:
    """Make the Debian root of each Slurm release now (cached), so a later `up --slurm`
    starts at once. Nothing is started; a root made already is kept."""
    from slurmpre.sandbox.cluster import host_suite, require_root
    from slurmpre.sandbox.roots import Root, suite_of

    for release in releases:
        suite_of(release)  # every release checked before any work starts
    require_root()
    for release in dict.fromkeys(releases):
        if suite_of(release) == host_suite():
            click.echo(f"Slurm {release} is this host's own: nothing to fetch")
            continue
        root = Root.for_version(release)
        root.ensure(click.echo)
        click.echo(f"Slurm {release}: Debian {root.suite} root ready in {root.path}")


@sandbox.command("down")
def sandbox_down() -> None:
    """Stop exactly what `up` started, and the job processes it left."""
    _sandbox().down(say=click.echo)


@sandbox.command("status")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def sandbox_status(as_json: bool) -> None:
    """Say what runs where."""
    from slurmpre.sandbox.status import describe

    report = describe(_sandbox())
    if as_json:
        click.echo(_json(report))
    else:
        from slurmpre.sandbox.status import format_report

        click.echo(format_report(report))
    if not report["up"]:
        raise SystemExit(1)


@sandbox.command("preempt")
@click.argument("node")
@click.option(
    "--window", default=float(defaults.PREEMPT_WINDOW), show_default=True,
    help="Seconds from drain to removal.",
)  # fmt: skip
@click.option(
    "--return-after",
    type=float,
    default=None,
    help="Seconds after removal when a replacement node comes back (default: never).",
)
@click.option("--reason", default="preempted", show_default=True, help="The drain reason.")
@click.option(
    "--no-mark-down",
    is_flag=True,
    help="Do not tell Slurm the node is gone; let it notice after SlurmdTimeout.",
)
@click.option(
    "--once-empty",
    is_flag=True,
    help="Remove the node as soon as no job runs on it (by T+window at the latest).",
)
@click.option("--background", is_flag=True, help="Run the timeline in the background.")
def sandbox_preempt(
    node: str,
    window: float,
    return_after: float | None,
    reason: str,
    no_mark_down: bool,
    once_empty: bool,
    background: bool,
) -> None:
    """Preempt NODE as the provider does: drain now, remove at T+window, maybe return."""
    from slurmpre.sandbox.preempt import PreemptPlan, preempt, start_in_background

    plan = PreemptPlan(
        node, window, return_after, reason, mark_down=not no_mark_down, once_empty=once_empty
    )
    box = _sandbox()
    if background:
        pid, log = start_in_background(box, plan)
        click.echo(f"preempting {node} in the background (pid {pid}); timeline in {log}")
    else:
        box.config().node(node)
        preempt(box, plan, say=lambda line: click.echo(line))


# -- render / submit -----------------------------------------------------------
_spec_arg = click.argument("spec_file", metavar="SPEC.toml", type=click.Path(path_type=Path))
_set_opt = click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a spec key (repeatable; the command line wins); env.NAME=VALUE sets one.",
)


@cli.command("render")
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


@cli.command("submit")
@_spec_arg
@_set_opt
@click.option("--dry-run", is_flag=True, help="Print the script; submit nothing.")
@click.option("--test-only", is_flag=True, help="Ask Slurm to validate it (sbatch --test-only).")
@click.option(
    "--force", is_flag=True, help="Submit even while another live job uses the checkpoint folder."
)
def submit_cmd(
    spec_file: Path, sets: tuple[str, ...], dry_run: bool, test_only: bool, force: bool
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
    done = submit(spec, default_client(), force=force)
    click.echo(done.job_id)
    click.echo(f"log: {done.log}  script: {done.script_copy}", err=True)


# -- checkpoints -----------------------------------------------------------------
@cli.group()
def ckpt() -> None:
    """Checkpoints in a folder: the newest complete one, all of them, one checked, pruning."""


def _folder(value: str) -> Path:
    if not value.strip():
        raise UsageError("FOLDER is empty: name the checkpoint folder")
    return Path(value)


@ckpt.command("latest")
@click.argument("folder")
def ckpt_latest(folder: str) -> None:
    """Print the newest complete checkpoint under FOLDER (exit 1 if there is none)."""
    from slurmpre.errors import CheckpointError
    from slurmpre.job.checkpoints import latest, summarize

    found = latest(_folder(folder))
    for line in summarize(found):
        click.echo(_shown(line), err=True)
    if found.checkpoint is None:
        raise CheckpointError(f"no complete checkpoint under {str(folder)!r}")
    click.echo(str(found.checkpoint.path))


@ckpt.command("list")
@click.argument("folder")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--all", "show_all", is_flag=True, help="Also what is not a checkpoint, and why.")
def ckpt_list(folder: str, as_json: bool, show_all: bool) -> None:
    """Every checkpoint under FOLDER, newest first: step, format, complete or not and why."""
    from slurmpre.job.checkpoints import ignored, list_all

    path = _folder(folder)
    found = list_all(path)
    others = ignored(path) if show_all else []
    if as_json:
        out: dict[str, object] | list[dict[str, object]] = [c.as_dict() for c in found]
        if show_all:
            out = {
                "checkpoints": out,
                "ignored": [{"name": i.name, "reason": i.reason} for i in others],
            }
        click.echo(_json(out))
        return
    for c in found:
        step = "-" if c.step is None else str(c.step)
        state = "complete" if c.complete else "INCOMPLETE"
        click.echo(
            f"{step:>10}  {state:<10}  {c.format.value:<10}  {_shown(c.path.name)}  ({c.reason})"
        )
    for i in others:
        click.echo(f"{'-':>10}  {'ignored':<10}  {'':<10}  {_shown(i.name)}  ({i.reason})")


@ckpt.command("verify")
@click.argument("path")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def ckpt_verify(path: str, as_json: bool) -> None:
    """Say whether the checkpoint at PATH is complete, and why (exit 1 if it is not)."""
    from slurmpre.errors import CheckpointError
    from slurmpre.job.checkpoints import judge

    found = judge(_folder(path))
    if as_json:
        click.echo(_json(found.as_dict()))
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

    done = prune(
        _folder(folder),
        keep,
        default_client(),
        dry_run=dry_run,
        wait=wait,
        say=lambda line: click.echo(f"slurmpre: {line}", err=True),
    )
    if as_json:
        click.echo(
            json.dumps(
                {
                    "dry_run": done.dry_run,
                    "removed": [e.__dict__ for e in done.removed],
                    "kept": [{"name": e.name, "why": e.why} for e in done.kept],
                    "failed": [f.__dict__ for f in done.failed],
                    "freed_bytes": done.freed,
                },
                indent=2,
            )
        )
    else:
        verb = "would remove" if dry_run else "removed"
        for e in done.removed:
            click.echo(f"{verb} {_shown(e.name)} ({human(e.size)}): {e.why}")
        for e in done.kept:
            click.echo(f"kept {_shown(e.name)}: {e.why}")
        for f in done.failed:
            click.echo(f"could not remove {_shown(f.name)} (left as {_shown(f.left_as)}): {f.why}")
        freed = "would free" if dry_run else "freed"
        click.echo(f"{freed} {human(done.freed)} in {len(done.removed)} entries")
    if done.failed:
        from slurmpre.errors import CheckpointError

        names = ", ".join(f.name for f in done.failed)
        raise CheckpointError(f"could not remove {len(done.failed)} entries: {names}")


# -- status, logs, cancel --------------------------------------------------------
def _slurm_job(client: Any, job: str) -> Any:
    """Slurm's view of ``job``, or None when Slurm has forgotten it."""
    from slurmpre.errors import JobNotFound

    try:
        return client.job(job)
    except JobNotFound:
        return None


def _slurm_view(client: Any, job: str) -> Any:
    """Slurm's view of ``job`` for a command that only shows it: None when Slurm has
    forgotten it, or does not answer (said in one line: the ledger is shown instead)."""
    from slurmpre.errors import CommandError

    try:
        return _slurm_job(client, job)
    except CommandError as exc:
        first = str(exc).splitlines()[0]
        click.echo(
            f"slurmpre: Slurm did not answer about job {job} ({first}): showing what its "
            "checkpoint folder records",
            err=True,
        )
        return None


def _mine(info: Any, job: str) -> None:
    import getpass

    me = getpass.getuser()
    if info is not None and info.user and info.user != me:
        raise UsageError(f"job {job} belongs to {info.user}, not to you ({me}): refused")


@cli.command()
@click.argument("job", required=False)
@click.option("--checkpoint-dir", default=None, help="Find the job in this folder's ledger.")
@click.option("--follow", is_flag=True, help="Keep the view updated until the job ends.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option(
    "--price", type=float, default=defaults.ON_DEMAND_PRICE, show_default=True,
    help="On-demand $/GPU-hour.",
)  # fmt: skip
@click.option(
    "--discount", type=float, default=defaults.PREEMPTIBLE_DISCOUNT, show_default=True,
    help="Preemptible discount.",
)  # fmt: skip
def status(
    job: str | None,
    checkpoint_dir: str | None,
    follow: bool,
    as_json: bool,
    price: float,
    discount: float,
) -> None:
    """A job's attempts, how each ended, steps lost and cost; without JOB, your jobs."""
    import time

    from slurmpre.job.ledger import Ledger
    from slurmpre.login import jobs
    from slurmpre.login.status import (
        UNKNOWN_TO_SLURM,
        JobStatus,
        Prices,
        gpus_of,
        job_status,
        lines,
    )
    from slurmpre.slurm.client import default_client
    from slurmpre.slurm.parse import FINISHED

    if not (math.isfinite(price) and price >= 0 and 0 <= discount < 1):
        raise UsageError(
            f"--price {price:g} --discount {discount:g}: price >= 0, 0 <= discount < 1"
        )
    client = default_client()
    if job is None and checkpoint_dir is None:
        _list_jobs(client, as_json)
        return
    entry = jobs.locate(job or "", checkpoint_dir)

    def once() -> JobStatus:
        info = _slurm_view(client, entry.job)
        _mine(info, entry.job)
        records = Ledger(Path(entry.checkpoint_dir)).records()
        return job_status(
            entry.job,
            entry.name,
            entry.checkpoint_dir,
            records,
            info,
            gpus_per_node=gpus_of(info),
            prices=Prices(price, discount),
            now=time.time(),
        )

    while True:
        st = once()
        if as_json:
            click.echo(_json(st.as_dict()))
        else:
            for line in lines(st):
                click.echo(line)
        if not follow or st.state in FINISHED or st.state == UNKNOWN_TO_SLURM:
            return
        time.sleep(5)
        click.echo("")


def _list_jobs(client: Any, as_json: bool) -> None:
    import getpass

    from slurmpre.job.ledger import Ledger
    from slurmpre.job.records import Start
    from slurmpre.login import jobs
    from slurmpre.login.status import UNKNOWN_TO_SLURM

    me = getpass.getuser()
    live = {j.job_id: j for j in client.jobs() if j.user == me}
    rows = []
    for e in jobs.known()[-50:]:
        info = live.get(e.job)
        try:
            records = Ledger(Path(e.checkpoint_dir)).records()
        except SlurmpreError:
            records = []
        starts = [r for r in records if isinstance(r, Start) and r.job == e.job]
        attempts = len({r.attempt for r in starts})
        rows.append(
            {
                "job": e.job,
                "name": e.name,
                "state": info.state if info else UNKNOWN_TO_SLURM,
                "restarts": info.restarts if info else max(attempts - 1, 0),
                "attempts": attempts,
                "in_place": sum(1 for r in starts if r.in_place),
                "checkpoint_dir": e.checkpoint_dir,
            }
        )
    if as_json:
        click.echo(_json(rows))
        return
    click.echo(f"{'job':>8}  {'name':<24} {'state':<17} {'restarts':>8}  checkpoints")
    for r in rows:
        click.echo(
            f"{r['job']:>8}  {str(r['name'])[:24]:<24} {r['state']:<17} {r['restarts']:>8}  "
            f"{r['checkpoint_dir']}"
        )


@cli.command()
@click.argument("job")
@click.option("--checkpoint-dir", default=None, help="Find the job in this folder's ledger.")
@click.option("--attempt", type=int, default=None, help="Only this attempt's own log.")
@click.option("--follow", is_flag=True, help="Keep printing until the job ends, across requeues.")
def logs(job: str, checkpoint_dir: str | None, attempt: int | None, follow: bool) -> None:
    """The job's log: every attempt, appended; or one attempt's own log."""
    import time

    from slurmpre.errors import CommandError
    from slurmpre.job.layout import LogLayout
    from slurmpre.login import jobs
    from slurmpre.slurm.client import default_client

    entry = jobs.locate(job, checkpoint_dir)
    logs = LogLayout(Path(entry.log_dir), entry.name)
    if attempt is not None:
        if attempt < 0:
            raise UsageError(f"--attempt {attempt}: attempts count from 0")
        path = logs.attempt_log(entry.job, attempt)
    else:
        path = logs.job_log(entry.job)
    client = default_client()
    info = _slurm_view(client, entry.job)
    _mine(info, entry.job)
    if info is not None and info.stdout and attempt is None:
        path = Path(info.stdout)
    offset = 0
    while True:
        try:
            offset = _print_from(path, offset)
        except FileNotFoundError:
            if not follow:
                raise SlurmpreError(f"no log at {path} (has the job started?)") from None
        except OSError as exc:
            raise SlurmpreError(f"cannot read the log {path}: {exc.strerror or exc}") from None
        if not follow:
            return
        try:
            info = _slurm_job(client, entry.job)
        except CommandError:
            time.sleep(1)  # Slurm does not answer now: the job may still run
            continue
        if info is None or info.finished:
            time.sleep(1)  # what the last attempt wrote as it ended
            with contextlib.suppress(FileNotFoundError):
                _print_from(path, offset)
            return
        time.sleep(1)


def _print_from(path: Path, offset: int) -> int:
    """Print the log from ``offset`` to its current end, a MiB at a time; the new offset.
    Only a regular file is read (a FIFO or a device by the log's name is refused)."""
    from slurmpre.reading import open_regular

    with open_regular(path) as fh:
        end = os.fstat(fh.fileno()).st_size
        fh.seek(offset)
        while offset < end:
            chunk = fh.read(min(1 << 20, end - offset))
            if not chunk:
                break
            click.echo(chunk.decode(errors="replace"), nl=False)
            offset += len(chunk)
    return offset


@cli.command()
@click.argument("job")
@click.option("--checkpoint-dir", default=None, help="Find the job in this folder's ledger.")
@click.option("--after-checkpoint", is_flag=True, help="Wait until no checkpoint is being written.")
@click.option("--wait", type=float, default=1800.0, show_default=True, help="At most this long.")
def cancel(job: str, checkpoint_dir: str | None, after_checkpoint: bool, wait: float) -> None:
    """Cancel a job, saying whether a checkpoint was being written at that moment."""
    from filelock import Timeout

    from slurmpre.job.ledger import Ledger
    from slurmpre.login import jobs
    from slurmpre.slurm.client import default_client

    if not wait >= 0:
        raise UsageError(f"--wait {wait:g}: give 0 seconds or more")
    entry = jobs.locate(job, checkpoint_dir)
    client = default_client()
    info = _slurm_job(client, entry.job)
    if info is None:
        raise SlurmpreError(f"Slurm knows no job {entry.job}: nothing to cancel")
    _mine(info, entry.job)
    if info.finished:
        raise SlurmpreError(f"job {entry.job} has already ended ({info.state})")
    ledger = Ledger(Path(entry.checkpoint_dir))
    if not ledger.dir.is_dir():
        client.cancel(entry.job)
        click.echo(f"cancelled job {entry.job}")
        return
    lock = ledger.writing_lock(wait if after_checkpoint else 0)
    try:
        lock.acquire()
    except Timeout:
        if after_checkpoint:
            raise SlurmpreError(
                f"a checkpoint was still being written after {wait:g} s: job {entry.job} "
                "not cancelled"
            ) from None
        client.cancel(entry.job)
        click.echo(
            f"cancelled job {entry.job} while a checkpoint was being written: that checkpoint "
            "is lost, the one before it stays the newest complete"
        )
        return
    try:
        # Holding the writing lock, no checkpoint can begin before the cancel lands.
        client.cancel(entry.job)
    finally:
        lock.release()
    click.echo(f"cancelled job {entry.job}; no checkpoint was being written")


# -- nodes ---------------------------------------------------------------------
@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def nodes(as_json: bool) -> None:
    """Preemptible against standard capacity; draining nodes and your jobs on them."""
    import getpass

    from slurmpre.login.capacity import capacity, lines
    from slurmpre.slurm.client import default_client

    client = default_client()
    cap = capacity(client.nodes(), client.jobs(), getpass.getuser())
    if as_json:
        click.echo(_json(cap.as_dict()))
        return
    for line in lines(cap):
        click.echo(line)


# -- plan ----------------------------------------------------------------------
@cli.command()
@click.argument("folders", nargs=-1)
@click.option("--checkpoint-seconds", type=float, default=None, help="One checkpoint's write.")
@click.option("--mtbf", type=float, default=None, help="Seconds of running per preemption.")
@click.option("--restart-seconds", type=float, default=None, help="Requeue to training again.")
@click.option("--window", type=float, default=None, help="Drain to removal (default 300).")
@click.option("--margin", type=float, default=None, help="Safety margin (default 30).")
@click.option("--notice-seconds", type=float, default=None, help="Drain to notice (default 5).")
@click.option(
    "--price", type=float, default=defaults.ON_DEMAND_PRICE, show_default=True,
    help="On-demand $/GPU-hour.",
)  # fmt: skip
@click.option(
    "--discount", type=float, default=defaults.PREEMPTIBLE_DISCOUNT, show_default=True,
    help="Preemptible discount.",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def plan(
    folders: tuple[str, ...],
    checkpoint_seconds: float | None,
    mtbf: float | None,
    restart_seconds: float | None,
    window: float | None,
    margin: float | None,
    notice_seconds: float | None,
    price: float,
    discount: float,
    as_json: bool,
) -> None:
    """How often to checkpoint, the goodput, and the cost per useful GPU-hour.

    Measures what it can in the ledgers of the checkpoint FOLDERS given (checkpoint
    write time, running time per preemption, requeue to next start); options override.
    """
    from slurmpre import defaults
    from slurmpre.job.ledger import Ledger
    from slurmpre.job.records import Record
    from slurmpre.login.plan import Inputs, lines, make_plan, measure

    records: list[Record] = []
    for folder in folders:
        ledger = Ledger(_folder(folder))
        if not ledger.path.is_file():
            raise UsageError(f"{folder!r} has no ledger ({ledger.path} does not exist)")
        records += ledger.records()
    seen = measure(records)
    sources = []

    def pick(given: float | None, measured: float | None, flag: str, what: str) -> float:
        if given is not None:
            return given
        if measured is None:
            where = "in the ledger(s)" if folders else "(no checkpoint folder given)"
            raise UsageError(f"no {what} measured {where}: give {flag}")
        sources.append(f"{what} {measured:.4g} s")
        return measured

    inputs = Inputs(
        checkpoint_s=pick(
            checkpoint_seconds, seen.checkpoint_s, "--checkpoint-seconds", "checkpoint write"
        ),
        mtbf_s=pick(mtbf, seen.mtbf_s, "--mtbf", "running time per preemption"),
        restart_s=pick(restart_seconds, seen.restart_s, "--restart-seconds", "restart"),
        window_s=defaults.PREEMPT_WINDOW if window is None else window,
        margin_s=defaults.SAFETY_MARGIN if margin is None else margin,
        notice_s=defaults.POLL_INTERVAL if notice_seconds is None else notice_seconds,
        price=price,
        discount=discount,
        sources=tuple(sources),
    )
    result = make_plan(inputs)
    if as_json:
        click.echo(_json(result.as_dict()))
        return
    for line in lines(result):
        click.echo(line)


@cli.command(
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


# -- drill -------------------------------------------------------------------
@cli.command()
@click.option("--preemptions", default=3, show_default=True, help="How many preemptions.")
@click.option(
    "--window", default=15.0, show_default=True, help="Seconds from drain to node removal."
)
@click.option("--seed", type=int, default=None, help="Replay a schedule (printed by each run).")
@click.option(
    "--baseline", is_flag=True, help="Also run the seeds' recipe under the same schedule."
)
@click.option(
    "--stock-timings", is_flag=True, help="Slurm's default timings (each requeue >= 121 s)."
)
@click.option(
    "--steps", type=int, default=None, help="Training steps (default: enough for every preemption)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the timeline and summary as JSON.")
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("/var/lib/slurmpre/drill"),
    show_default=True,
    help="Where each run keeps its checkpoints and logs (a folder per run).",
)
def drill(
    preemptions: int,
    window: float,
    seed: int | None,
    baseline: bool,
    stock_timings: bool,
    steps: int | None,
    as_json: bool,
    workdir: Path,
) -> None:
    """Preempt a real training job on the local sandbox and show that no work is lost."""
    from slurmpre.drill.run import DrillOptions, render, run_drill

    opts = DrillOptions(
        preemptions=preemptions,
        window=window,
        seed=seed,
        baseline=baseline,
        stock_timings=stock_timings,
        steps=steps,
        workdir=workdir,
    )
    say = (lambda line: click.echo(line, err=True)) if as_json else click.echo
    result = run_drill(_sandbox(), opts, say=say)
    for line in render(result):
        say(line)
    if as_json:
        click.echo(_json(result.as_dict()))
    failures = result.failures()
    if failures:
        raise SlurmpreError("drill failed: " + "; ".join(failures))


# -- entry point ---------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    if args[:1] == ["run"]:
        from slurmpre.job.entry import main as job

        return job(args)
    try:
        cli.main(args=args, prog_name="slurmpre", standalone_mode=False)
    except SlurmpreError as exc:
        _err(str(exc))
        if debug:
            traceback.print_exc()
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("slurmpre: interrupted", err=True)
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        click.echo("slurmpre: interrupted", err=True)
        return EXIT_INTERRUPTED
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 0
    except Exception as exc:  # noqa: BLE001 - the one place unexpected errors become exit 3
        _err(f"unexpected {type(exc).__name__}: {exc}")
        if debug:
            traceback.print_exc()
        else:
            click.echo("slurmpre: run again with --debug for the traceback", err=True)
        return EXIT_UNEXPECTED
    return 0
