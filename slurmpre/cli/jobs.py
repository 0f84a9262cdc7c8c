"""``slurmpre status``, ``logs`` and ``cancel``: one job, as Slurm and its ledger see it."""

from __future__ import annotations

import math
import time
from pathlib import Path

import click

from slurmpre.cli.common import json_text, prices, say_err
from slurmpre.errors import UsageError

_checkpoint_dir = click.option(
    "--checkpoint-dir", default=None, help="Find the job in this folder's ledger."
)


@click.command()
@click.argument("job", required=False)
@_checkpoint_dir
@click.option("--follow", is_flag=True, help="Keep the view updated until the job ends.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@prices
def status(
    job: str | None,
    checkpoint_dir: str | None,
    follow: bool,
    as_json: bool,
    price: float,
    discount: float,
) -> None:
    """A job's attempts, how each ended, steps lost and cost; without JOB, your jobs."""
    from slurmpre.job.ledger import Ledger
    from slurmpre.login import jobs
    from slurmpre.login.status import JobStatus, Prices, chain, gpus_of, job_status, lines
    from slurmpre.slurm.client import default_client
    from slurmpre.slurm.parse import FINISHED, UNKNOWN_TO_SLURM

    if not (math.isfinite(price) and price >= 0 and 0 <= discount < 1):
        raise UsageError(
            f"--price {price:g} --discount {discount:g}: price >= 0, 0 <= discount < 1"
        )
    client = default_client()
    if job is None and checkpoint_dir is None:
        _list_jobs(jobs.rows(client), as_json)
        return
    entry = jobs.locate(job or "", checkpoint_dir)

    def once() -> JobStatus:
        records = Ledger(Path(entry.checkpoint_dir)).records()
        last = chain(records, entry.job)[-1]  # after hand-overs, the successor Slurm runs
        info = jobs.slurm_view(client, last, say_err)
        jobs.check_mine(info, last)
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
            click.echo(json_text(st.as_dict()))
        else:
            for line in lines(st):
                click.echo(line)
        if not follow or st.state in FINISHED or st.state == UNKNOWN_TO_SLURM:
            return
        time.sleep(5)
        click.echo("")


def _list_jobs(rows: list[dict[str, object]], as_json: bool) -> None:
    if as_json:
        click.echo(json_text(rows))
        return
    click.echo(f"{'job':>8}  {'name':<24} {'state':<17} {'restarts':>8}  checkpoints")
    for r in rows:
        click.echo(
            f"{r['job']:>8}  {str(r['name'])[:24]:<24} {r['state']!s:<17} {r['restarts']!s:>8}  "
            f"{r['checkpoint_dir']}"
        )


@click.command()
@click.argument("job")
@_checkpoint_dir
@click.option("--attempt", type=int, default=None, help="Only this attempt's own log.")
@click.option(
    "-f", "--follow", is_flag=True, help="Keep printing until the job ends, across requeues."
)
@click.option("-n", "--tail", type=int, default=None, help="Only the last N lines (then -f).")
def logs(
    job: str, checkpoint_dir: str | None, attempt: int | None, follow: bool, tail: int | None
) -> None:
    """The job's log: every attempt, appended; or one attempt's own log."""
    from slurmpre.login import jobs
    from slurmpre.login.logs import follow_successors, log_path, show
    from slurmpre.slurm.client import default_client

    entry = jobs.locate(job, checkpoint_dir)
    if attempt is not None and attempt < 0:
        raise UsageError(f"--attempt {attempt}: attempts count from 0")
    client = default_client()
    info = jobs.slurm_view(client, entry.job, say_err)
    jobs.check_mine(info, entry.job)
    path = log_path(entry, attempt, info)
    write = lambda text: click.echo(text, nl=False)  # noqa: E731
    if tail is not None and tail < 0:
        raise UsageError(f"--tail {tail}: give 0 lines or more")
    show(path, write, follow=follow, client=client, job=entry.job, tail=tail)
    if follow and attempt is None:
        follow_successors(entry, client, write)


@click.command()
@click.argument("job")
@_checkpoint_dir
@click.option(
    "--timeout", type=float, default=None, help="Give up after this many seconds (exit 1)."
)
def wait(job: str, checkpoint_dir: str | None, timeout: float | None) -> None:
    """Wait for a job's run to end, across requeues and hand-overs: exit 0 when it
    completed, 1 when it failed, was cancelled or ran out of time, naming why."""
    from slurmpre.login.handle import Job

    found = Job.find(job, checkpoint_dir)
    state = found.wait(timeout)
    click.echo(f"job {found.run()[-1]} {state.lower()}")


@click.command()
@click.argument("job")
@_checkpoint_dir
@click.option("--after-checkpoint", is_flag=True, help="Wait until no checkpoint is being written.")
@click.option("--wait", type=float, default=1800.0, show_default=True, help="At most this long.")
def cancel(job: str, checkpoint_dir: str | None, after_checkpoint: bool, wait: float) -> None:
    """Cancel a job, saying whether a checkpoint was being written at that moment."""
    from slurmpre.login import jobs
    from slurmpre.login.cancel import cancel as cancel_job
    from slurmpre.slurm.client import default_client

    if not wait >= 0:
        raise UsageError(f"--wait {wait:g}: give 0 seconds or more")
    entry = jobs.locate(job, checkpoint_dir)
    message = cancel_job(default_client(), entry, after_checkpoint=after_checkpoint, wait=wait)
    click.echo(message)
