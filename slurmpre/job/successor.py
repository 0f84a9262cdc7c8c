"""A successor: the same batch script as a new job, instead of a requeue.

Slurm starts a requeued job again only after ``cred_expire + 1`` seconds (121 s on
stock timings), while a new job with the same constraint starts in seconds. With
``restart = "successor"``, on a notice that ends the allocation the watcher (once
the notice checkpoint is committed, or at the deadline) makes this job not
requeueable, so a node removal cannot bring it back beside its successor, then
submits the script the last ``slurmpre submit`` recorded in the checkpoint folder,
with the environment sbatch had then (never this job's ``SLURM_*`` variables, which
would steer the new job's srun), and without the draining nodes. The new job's node
0 waits for this one to end before it chooses a checkpoint (`wait_for_predecessor`):
one trainer per checkpoint folder at any time.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence

from slurmpre.atomic import write_atomic
from slurmpre.errors import CommandError, JobEnvironmentError, JobNotFound, SlurmError
from slurmpre.job.env import EARLIER_RESTARTS_ENV, PREDECESSOR_ENV, JobEnv
from slurmpre.job.layout import FolderLayout
from slurmpre.job.ledger import Ledger
from slurmpre.job.records import Successor
from slurmpre.reading import MEDIUM, read_text
from slurmpre.slurm.client import CommandLineSlurm, SlurmClient

POLL = 1.0  # seconds between looks at the predecessor
RECORD_GRACE = 30.0  # seconds a hand-over record may take to follow the successor's start


def submit_env(env: Mapping[str, str]) -> dict[str, str]:
    """What a successor is submitted with: sbatch's environment at the user's submit,
    without Slurm's job variables (a submit from inside an allocation has them) and
    without a predecessor of its own."""
    return {
        k: v
        for k, v in env.items()
        if not k.startswith("SLURM_") and k not in (PREDECESSOR_ENV, EARLIER_RESTARTS_ENV)
    }


def record(layout: FolderLayout, script: str, env: Mapping[str, str], mode: int) -> None:
    """Keep the script and sbatch's environment of a submit, for the successors."""
    write_atomic(layout.script, script, mode=mode)
    write_atomic(layout.submit_env, json.dumps(submit_env(env), sort_keys=True), mode=mode)


def recorded(layout: FolderLayout) -> tuple[str, dict[str, str]]:
    """The script and environment of the last submit; a SlurmError when they are missing
    (a job submitted by a slurmpre before successors, or with a bare sbatch)."""
    try:
        script = read_text(layout.script, MEDIUM)
        env = json.loads(read_text(layout.submit_env, MEDIUM))
    except (OSError, ValueError) as exc:
        raise SlurmError(f"no recorded submit to repeat in {layout.meta}: {exc}") from None
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        raise SlurmError(f"{layout.submit_env} is not an environment (names to strings)")
    return script, env


def submit_successor(
    layout: FolderLayout, job: JobEnv, exclude: Sequence[str], *, timeout: float = 30.0
) -> str:
    """Submit the recorded script as the job that takes over from ``job``; its id. Only
    this array task again, for an array task. A SlurmError when sbatch refuses it."""
    script, env = recorded(layout)
    env[PREDECESSOR_ENV] = job.tag
    env[EARLIER_RESTARTS_ENV] = str(job.run_restarts + 1)  # this hand-over is one more
    args = []
    if exclude:
        args.append(f"--exclude={','.join(exclude)}")
    if job.array_task_id:
        args.append(f"--array={job.array_task_id}")
    client = CommandLineSlurm(timeout=timeout, env=env)
    return client.submit(script, args=args)


def wait_for_predecessor(
    ledger: Ledger,
    client: SlurmClient,
    job: JobEnv,
    timeout: float,
    say: Callable[[str], None],
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """In a successor, before choosing a checkpoint: wait until the job it follows has
    ended (it commits its notice checkpoint, then ends), so that two trainers never
    share the folder. Only a predecessor the ledger names as handing over to this job
    is waited for; a JobEnvironmentError when it is still running after ``timeout``."""
    predecessor = job.predecessor
    if not predecessor:
        return
    deadline = clock() + timeout
    named_by = clock() + RECORD_GRACE
    said = False
    while True:
        try:
            info = client.job(predecessor)
        except JobNotFound:
            return
        except CommandError as exc:
            info = None
            first = str(exc).splitlines()[0]
            say(f"cannot tell whether job {predecessor} has ended ({first}): asking again")
        if info is not None and info.finished:
            say(f"job {predecessor} has ended ({info.state}): taking over")
            return
        if info is not None and info.state == "PENDING":
            # Requeued by hand after the hand-over: the attempt that trained has ended,
            # and the next one will not train (it finds its hand-over in the ledger).
            say(f"job {predecessor} was requeued after its hand-over: taking over")
            return
        # The predecessor records the hand-over just after its sbatch returns: only a
        # job that the ledger names as handing over to this one is waited for.
        if not _handed_over(ledger, predecessor, job.tag) and clock() >= named_by:
            say(
                f"{PREDECESSOR_ENV}={predecessor}, but the ledger records no hand-over from "
                "that job to this one: not waiting for it"
            )
            return
        if clock() >= deadline:
            raise JobEnvironmentError(
                f"job {predecessor}, which this job takes over from, still runs after "
                f"{timeout:g} s: refusing to train beside it"
            )
        if not said:
            say(f"waiting for job {predecessor} to commit its checkpoint and end")
            said = True
        sleep(POLL)


def _handed_over(ledger: Ledger, predecessor: str, successor: str) -> bool:
    return any(
        isinstance(r, Successor) and r.job == predecessor and r.successor == successor
        for r in ledger.records()
    )
