"""``slurmpre status``, ``logs`` and ``cancel``: one job, as Slurm and its ledger see it."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from slurmpre.cli.common import complete_jobs, json_document, prices, say_err, shown
from slurmpre.errors import JobFailed, SlurmpreError, UsageError

if TYPE_CHECKING:
    from slurmpre.login.jobs import Submitted
    from slurmpre.slurm.client import SlurmClient

_checkpoint_dir = click.option(
    "--checkpoint-dir", default=None, help="Find the job in this folder's ledger."
)


@click.command()
@click.argument("job", required=False, shell_complete=complete_jobs)
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
        _list_jobs(jobs.rows(client, warn=say_err), as_json)
        return
    entry = jobs.locate(job or "", checkpoint_dir)
    labels = _task_labels(entry)

    def once(task: jobs.Submitted) -> JobStatus:
        records = Ledger(Path(task.checkpoint_dir)).records()
        last = chain(records, task.job)[-1]  # after hand-overs, the successor Slurm runs
        info = jobs.slurm_view(client, last, say_err)
        jobs.check_mine(info, last)
        return job_status(
            task.job,
            task.name,
            task.checkpoint_dir,
            records,
            info,
            gpus_per_node=gpus_of(info),
            prices=Prices(price, discount),
            now=time.time(),
        )

    while True:
        found = [once(task) for task in entry.tasks()]
        if as_json and entry.array is None:
            click.echo(json_document("status", found[0].as_dict()))
        elif as_json:
            tasks = [
                {"task": st.job.rpartition("_")[2], "label": labels.get(st.job), **st.as_dict()}
                for st in found
            ]
            click.echo(json_document("array-status", {
                "job": entry.job, "name": entry.name, "array": entry.array, "tasks": tasks,
            }))  # fmt: skip
        else:
            if entry.array is not None:
                click.echo(f"array job {entry.job} ({shown(entry.name)}): tasks {entry.array}")
            for n, st in enumerate(found):
                if n:
                    click.echo("")
                for line in lines(st):
                    click.echo(line)
                if st.job in labels:
                    click.echo(f"  task: {shown(labels[st.job])}")
        ended = all(st.state in FINISHED or st.state == UNKNOWN_TO_SLURM for st in found)
        if not follow or ended:
            return
        time.sleep(5)
        click.echo("")


def _task_labels(entry: Submitted) -> dict[str, str]:
    """A sweep's tasks as its submit named them (``123_0`` -> ``env.LR=0.1``)."""
    from slurmpre.job import records
    from slurmpre.job.ledger import Ledger

    if entry.array is None:
        return {}
    try:
        found = Ledger(Path(entry.checkpoint_dir)).records()
    except SlurmpreError:
        return {}
    mine = next((r for r in found if isinstance(r, records.Submitted) and r.job == entry.job), None)
    if mine is None or not mine.tasks:
        return {}
    return {t.job: label for t, label in zip(entry.tasks(), mine.tasks, strict=False)}


def _list_jobs(rows: list[dict[str, object]], as_json: bool) -> None:
    if as_json:
        click.echo(json_document("jobs", {"jobs": rows}))
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
@click.option("--attempt", type=int, default=None, help="Only this attempt's own log.")
@click.option(
    "-f", "--follow", is_flag=True, help="Keep printing until the job ends, across requeues."
)
@click.option("-n", "--tail", type=int, default=None, help="Only the last N lines (then -f).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (not with -f).")
@click.option(
    "--node", type=int, default=None,
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
    from slurmpre.login import jobs
    from slurmpre.login.logs import NodeLines, follow_successors, log_path, show
    from slurmpre.slurm.client import default_client

    entry = jobs.locate(job, checkpoint_dir)
    if attempt is not None and attempt < 0:
        raise UsageError(f"--attempt {attempt}: attempts count from 0")
    if tail is not None and tail < 0:
        raise UsageError(f"--tail {tail}: give 0 lines or more")
    if as_json and follow:
        raise UsageError("--json prints the logs as they are now: not with --follow")
    client = default_client()
    if as_json:
        texts = []
        for task in entry.tasks():
            info = None if entry.array is not None else jobs.slurm_view(client, task.job, say_err)
            jobs.check_mine(info, task.job)
            path = log_path(task, attempt, info)
            parts: list[str] = []
            keep = NodeLines(node, parts.append) if node is not None else parts.append
            try:
                show(path, keep, tail=tail)
                found = True
            except SlurmpreError:
                found = False
            if isinstance(keep, NodeLines):
                keep.flush()
            texts.append(
                {"job": task.job, "path": str(path), "found": found, "text": "".join(parts)}
            )
        click.echo(json_document("logs", {"job": entry.job, "attempt": attempt, "logs": texts}))
        return
    echo = lambda text: click.echo(text, nl=False)  # noqa: E731
    kept = NodeLines(node, echo) if node is not None else None
    write = kept if kept is not None else echo
    try:
        if entry.array is not None:
            _array_logs(entry, client, write, attempt=attempt, follow=follow, tail=tail)
        else:
            info = jobs.slurm_view(client, entry.job, say_err)
            jobs.check_mine(info, entry.job)
            path = log_path(entry, attempt, info)
            show(path, write, follow=follow, client=client, job=entry.job, tail=tail)
            if follow and attempt is None:
                follow_successors(entry, client, write)
    finally:
        if kept is not None:
            kept.flush()
    if follow and attempt is None:
        # Ends as `slurmpre wait` does: exit 0 when the run completed, else 1 naming why.
        from slurmpre.login.handle import Job

        Job.from_entry(entry, client).wait(timeout=120)


def _array_logs(
    entry: Submitted,
    client: SlurmClient,
    write: Callable[[str], None],
    *,
    attempt: int | None,
    follow: bool,
    tail: int | None,
) -> None:
    from slurmpre.login.logs import follow_tasks, log_path, show

    tasks = [(t.job, log_path(t, attempt, None)) for t in entry.tasks()]
    if follow:
        follow_tasks(tasks, client, write, tail=tail)
        return
    for n, (job, path) in enumerate(tasks):
        write(f"{chr(10) if n else ''}==> {job} <==\n")
        if path.is_file():
            show(path, write, tail=tail)
        else:
            write(f"(no log yet at {path})\n")


@click.command()
@click.argument("job", shell_complete=complete_jobs)
@_checkpoint_dir
@click.option(
    "--timeout", type=float, default=None, help="Give up after this many seconds (exit 1)."
)
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
        except SlurmpreError as exc:  # the timeout: still running
            state, why = "WAITING", str(exc)
        last = found.id if found.array is not None else found.run()[-1]
        click.echo(json_document("wait", {"job": found.id, "last": last, "state": state,
                                          "why": why}))  # fmt: skip
        if state != "COMPLETED":
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
    from slurmpre.login import jobs
    from slurmpre.login.cancel import cancel as cancel_job
    from slurmpre.login.cancel import cancel_tasks
    from slurmpre.slurm.client import default_client

    if not wait >= 0:
        raise UsageError(f"--wait {wait:g}: give 0 seconds or more")
    entry = jobs.locate(job, checkpoint_dir)
    how = cancel_tasks if entry.array is not None else cancel_job
    message = how(default_client(), entry, after_checkpoint=after_checkpoint, wait=wait)
    if as_json:
        click.echo(json_document("cancel", {"job": entry.job, "said": message.splitlines()}))
    else:
        click.echo(message)
