"""A successor: the same batch script as a new job, instead of a requeue, which Slurm
starts only after its ``cred_expire + 1`` floor (docs/how-it-works.md, "A successor
instead of a requeue"). The new job's node 0 waits for this one to end before it
chooses a checkpoint (`wait_for_predecessor`): one trainer per checkpoint folder.

What it submits is the user's alone: the script is read from the job's own
``.slurmpre`` (owner-only, checked on the descriptor: `slurmpre.folder.trust`), and
the environment is this job's own, the one its training runs with (sbatch gave it
the user's at the first submit), less what Slurm sets for a job or a step. Nothing
of it is written to disk: no login environment, token or key reaches the volume.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence

from slurmpre import environment
from slurmpre.errors import CommandError, JobEnvironmentError, JobNotFound
from slurmpre.folder import script as script_file
from slurmpre.folder.layout import FolderLayout
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.record import Record
from slurmpre.folder.records import End, Successor
from slurmpre.job.start.env import JobEnv
from slurmpre.slurm import states
from slurmpre.slurm.client import CommandLineSlurm, SlurmClient

LOG = logging.getLogger(__name__)

POLL = 1.0  # seconds between looks at the predecessor
# Once its training has exited (its node 0 recorded the end), Slurm ends the job within
# a second or two, and each second the successor looks later is training time lost.
QUICK_POLL = 0.2
RECORD_GRACE = 30.0  # seconds a hand-over record may take to follow the successor's start
# What Slurm (and the MPI/PMI layer under srun) sets in a job or a step: a successor gets
# its own. The GPU lists are Slurm's gres binding of this allocation.
SLURM_SET = ("SLURM_", "SLURMD_", "PMI_", "PMIX_", "OMPI_")
# Of those, what the user set for Slurm's commands: the successor is submitted to the same
# cluster as this job (a site, or a sandbox beside the first, names its slurm.conf so).
KEPT = frozenset({"SLURM_CONF"})
GRES_SET = frozenset(
    {"CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES", "ZE_AFFINITY_MASK"}
)


def submit_env(env: Mapping[str, str]) -> dict[str, str]:
    """What a successor is submitted with: this job's environment, without what Slurm set
    for this job and its steps, without a predecessor of its own, and with each ``*PATH``
    list once per entry (the script puts its python first again, at every hand-over)."""
    own = (environment.PREDECESSOR, environment.EARLIER_RESTARTS)
    return {
        k: _once_each(v) if k.endswith("PATH") else v
        for k, v in env.items()
        if not (k.startswith(SLURM_SET) and k not in KEPT) and k not in GRES_SET and k not in own
    }


def _once_each(value: str) -> str:
    """``a:b:a:c`` -> ``a:b:c``: the same lookups, in the same order."""
    return ":".join(dict.fromkeys(value.split(":")))


def submit_successor(
    layout: FolderLayout,
    job: JobEnv,
    exclude: Sequence[str],
    *,
    env: Mapping[str, str],
    extra: Sequence[str] = (),
) -> str:
    """Submit the recorded script, with ``env`` (this job's own, `submit_env`), as the job
    that takes over from ``job``; its id. Only this array task again, for an array task.
    A SlurmError when sbatch refuses it."""
    script = script_file.recorded(layout)
    # What the submit gave sbatch on its command line, as the first job got it (over the
    # SBATCH_* variables this environment carries); then this hand-over's own, which win.
    args = script_file.recorded_args(layout, script)
    given = submit_env(env)
    given[environment.PREDECESSOR] = job.tag
    given[environment.EARLIER_RESTARTS] = str(job.run_restarts + 1)  # this hand-over is one more
    if exclude:
        args.append(f"--exclude={','.join(exclude)}")
    if job.array_task_id:
        args.append(f"--array={job.array_task_id}")
    args.extend(extra)  # where it trains (`placing`): after --exclude, which it widens
    client = CommandLineSlurm(timeout=30.0, env=given)
    return client.submit(script, args=args)


def wait_for_predecessor(
    ledger: Ledger,
    client: SlurmClient,
    job: JobEnv,
    timeout: float,
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
            LOG.info(f"cannot tell whether job {predecessor} has ended ({first}): asking again")
        if info is not None and info.finished:
            LOG.info(f"job {predecessor} has ended ({info.state}): taking over")
            return
        if info is not None and info.state in states.WAITING:
            # Requeued by hand after the hand-over: the attempt that trained has ended,
            # and the next one will not train (it finds its hand-over in the ledger).
            LOG.info(f"job {predecessor} was requeued after its hand-over: taking over")
            return
        # The predecessor records the hand-over just after its sbatch returns: only a
        # job that the ledger names as handing over to this one is waited for.
        after = _after_hand_over(ledger.records(), predecessor, job.tag)
        if after is None and clock() >= named_by:
            LOG.info(
                f"{environment.PREDECESSOR}={predecessor}, but the ledger records no hand-over "
                "from that job to this one: not waiting for it"
            )
            return
        if clock() >= deadline:
            raise JobEnvironmentError(
                f"job {predecessor}, which this job takes over from, still runs after "
                f"{timeout:g} s: refusing to train beside it"
            )
        if not said:
            LOG.info(f"waiting for job {predecessor} to commit its checkpoint and end")
            said = True
        # An End before the hand-over is an earlier step's (a restart in place).
        ended = after is not None and any(isinstance(r, End) and r.job == predecessor
                                          for r in after)  # fmt: skip
        sleep(QUICK_POLL if ended else POLL)


def _after_hand_over(
    records: Sequence[Record], predecessor: str, successor: str
) -> Sequence[Record] | None:
    """What the ledger holds after ``predecessor`` handed over to ``successor``; None
    while it records no such hand-over."""
    for i, r in enumerate(records):
        if isinstance(r, Successor) and r.job == predecessor and r.successor == successor:
            return records[i + 1 :]
    return None
