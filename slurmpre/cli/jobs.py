"""``slurmpre status``, ``logs`` and ``cancel``: one job, as Slurm and its ledger see it."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from slurmpre.cli.common import complete_jobs, json_document, prices, say_err, shown
from slurmpre.errors import JobFailed, SlurmpreError, UsageError
from slurmpre.slurm.states import COMPLETED, FINISHED, UNKNOWN_TO_SLURM

if TYPE_CHECKING:
    from slurmpre.login.status import Prices

_checkpoint_dir = click.option("--checkpoint-dir", help="Find the job in this folder's ledger.")


@click.command()
@click.argument("job", required=False, shell_complete=complete_jobs)
@_checkpoint_dir
@click.option("--follow", is_flag=True, help="Keep the view updated until the job ends.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option(
    "--html", "html_file", type=click.Path(dir_okay=False, path_type=Path),
    help="Write the run's timeline as one self-contained HTML page to this file.",
)  # fmt: skip
@prices
def status(
    job: str | None,
    checkpoint_dir: str | None,
    follow: bool,
    as_json: bool,
    html_file: Path | None,
    price: float,
    discount: float,
) -> None:
    """A job's attempts, how each ended, steps lost and cost; without JOB, your jobs."""
    from slurmpre.login import jobs
    from slurmpre.login.handle import Job
    from slurmpre.login.status import Prices, lines
    from slurmpre.slurm.client import default_client

    if not (math.isfinite(price) and price >= 0 and 0 <= discount < 1):
        raise UsageError(
            f"--price {price:g} --discount {discount:g}: price >= 0, 0 <= discount < 1"
        )
    if html_file is not None:
        _page(job, checkpoint_dir, html_file, Prices(price, discount), follow or as_json)
        return
    client = default_client()
    if job is None and checkpoint_dir is None:
        _list_jobs(jobs.rows(client, warn=say_err), as_json)
        return
    found = Job.find(job or "", checkpoint_dir, client, warn=say_err)
    labels = found.labels()
    while True:
        views = [task.status(Prices(price, discount)) for task in found.tasks()]
        if as_json and found.array is None:
            click.echo(json_document("status", views[0].as_dict()))
        elif as_json:
            tasks = [
                {"task": st.job.rpartition("_")[2], "label": labels.get(st.job), **st.as_dict()}
                for st in views
            ]
            click.echo(json_document("array-status", {
                "job": found.id, "name": found.name, "array": found.array, "tasks": tasks,
            }))  # fmt: skip
        else:
            if found.array is not None:
                click.echo(f"array job {found.id} ({shown(found.name)}): tasks {found.array}")
            for n, st in enumerate(views):
                if n:
                    click.echo("")
                for line in lines(st):
                    click.echo(line)
                if st.job in labels:
                    click.echo(f"  task: {shown(labels[st.job])}")
        ended = all(st.state in FINISHED or st.state == UNKNOWN_TO_SLURM for st in views)
        if not follow or ended:
            return
        time.sleep(5)
        click.echo("")


def _page(job: str | None, folder: str | None, path: Path, prices: Prices, other: bool) -> None:
    """`status --html FILE`: the run's timeline, one chart per task of an array."""
    from slurmpre.login import page, story
    from slurmpre.login.handle import Job

    if other:
        raise UsageError("--html writes a page once: not with --follow or --json")
    if job is None and folder is None:
        raise UsageError("--html draws one run: name its JOB (or --checkpoint-dir)")
    found = Job.find(job or "", folder, warn=say_err)
    charts = [story.of_job(task, prices) for task in found.tasks()]
    page.write(path, page.render(f"slurmpre: {found.name} (job {found.id})", charts))
    click.echo(f"timeline of job {found.id} ({shown(found.name)}): {shown(str(path))}")


def _list_jobs(rows: list[dict[str, object]], as_json: bool) -> None:
    if as_json:
        click.echo(json_document("jobs", {"jobs": rows}))
        return
    if not rows:  # a header over nothing would read as a listing that failed
        click.echo("no slurmpre jobs from this account yet: `slurmpre submit SPEC` queues one")
        return
    click.echo(f"{'job':>10}  {'name':<24} {'state':<17} {'restarts':>8}  checkpoints")
    for r in rows:
        click.echo(
            f"{r['job']:>10}  {shown(str(r['name']))[:24]:<24} {r['state']!s:<17} "
            f"{r['restarts']!s:>8}  {shown(str(r['checkpoint_dir']))}"
        )


@click.command()
@click.argument("job", shell_complete=complete_jobs)
@_checkpoint_dir
@click.option("--attempt", type=int, help="Only this attempt's own log.")
@click.option(
    "-f", "--follow", is_flag=True, help="Keep printing until the job ends, across requeues."
)
@click.option("-n", "--tail", type=int, help="Only the last N lines (then -f).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (not with -f).")
@click.option(
    "--node", type=int,
    help="Only the lines of the attempt's node N (0 is the first; multi-node jobs).",
)  # fmt: skip
def logs(
    job: str,
    checkpoint_dir: str | None,
    attempt: int | None,
    follow: bool,
    tail: int | None,
    node: int | None,
    as_json: bool,
) -> None:
    """The job's log: every attempt, appended; or one attempt's own log. An array job's
    tasks' logs one after the other (with -f, as they are written), each under a
    ``==> TASK <==`` line."""
    from slurmpre.login.handle import Job
    from slurmpre.login.logs import check_options

    check_options(attempt, tail, node)  # the options' own checks first, whatever the job
    if as_json and follow:
        raise UsageError("--json prints the logs as they are now: not with --follow")
    found = Job.find(job, checkpoint_dir, warn=say_err)
    if as_json:
        texts = [
            {"job": task, "path": str(path), "found": text is not None, "text": text or ""}
            for task, path, text in found.log_texts(attempt, tail=tail, node=node)
        ]
        click.echo(json_document("logs", {"job": found.id, "attempt": attempt, "logs": texts}))
        return
    found.stream_logs(
        lambda text: click.echo(text, nl=False),
        attempt=attempt, follow=follow, tail=tail, node=node,
    )  # fmt: skip
    if follow and attempt is None:
        # Ends as `slurmpre wait` does: exit 0 when the run completed, else 1 naming why.
        found.wait(timeout=120)


@click.command()
@click.argument("job", shell_complete=complete_jobs)
@_checkpoint_dir
@click.option("--timeout", type=float, help="Give up after this many seconds (exit 1).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def wait(job: str, checkpoint_dir: str | None, timeout: float | None, as_json: bool) -> None:
    """Wait for a job's run to end, across requeues and hand-overs: exit 0 when it
    completed, 1 when it failed, was cancelled or ran out of time, naming why."""
    from slurmpre.login.handle import Job

    found = Job.find(job, checkpoint_dir)
    if as_json:
        try:
            state, why = found.wait(timeout), None
        except JobFailed as exc:
            state, why = exc.state, str(exc)
        except UsageError:
            raise  # a bad --timeout: exit 2, not a job still running
        except SlurmpreError as exc:  # the timeout: still running
            state, why = "WAITING", str(exc)
        last = found.id if found.array is not None else found.run()[-1]
        click.echo(json_document("wait", {"job": found.id, "last": last, "state": state,
                                          "why": why}))  # fmt: skip
        if state != COMPLETED:
            raise SystemExit(1)
        return
    state = found.wait(timeout)
    if found.array is not None:
        click.echo(f"array job {found.id}: all {len(found.tasks())} tasks {state.lower()}")
    else:
        click.echo(f"job {found.run()[-1]} {state.lower()}")


@click.command()
@click.argument("job", shell_complete=complete_jobs)
@_checkpoint_dir
@click.option("--after-checkpoint", is_flag=True, help="Wait until no checkpoint is being written.")
@click.option("--wait", type=float, default=1800.0, show_default=True, help="At most this long.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def cancel(
    job: str, checkpoint_dir: str | None, after_checkpoint: bool, wait: float, as_json: bool
) -> None:
    """Cancel a job, saying whether a checkpoint was being written at that moment."""
    from slurmpre.login.handle import Job

    if not wait >= 0:  # the option's own check first, whatever the job
        raise UsageError(f"--wait {wait:g}: give 0 seconds or more")
    found = Job.find(job, checkpoint_dir)
    message = found.cancel(after_checkpoint=after_checkpoint, wait=wait)
    if as_json:
        click.echo(json_document("cancel", {"job": found.id, "said": message.splitlines()}))
    else:
        click.echo(message)
