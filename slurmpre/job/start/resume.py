"""Where this attempt starts from, the same on every node: node 0 clears what dead
attempts left, picks the newest complete checkpoint and publishes the choice (with the
rendezvous endpoint); the other nodes wait for it.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from slurmpre import environment
from slurmpre.errors import (
    CheckpointError,
    HandedOver,
    JobEnvironmentError,
    JobNotFound,
    RestartLimit,
    SlurmpreError,
    UsageError,
)
from slurmpre.folder import checkpoints, trust
from slurmpre.folder import snapshot as snapshots
from slurmpre.folder.access import Access, make_dir
from slurmpre.folder.layout import FolderLayout
from slurmpre.folder.ledger import Choice, Ledger
from slurmpre.folder.owner import describe, live_holders
from slurmpre.folder.records import AttemptId, GaveUp, PullAsked, PullDone, Start, Successor
from slurmpre.gitstate import git_state
from slurmpre.job.handover import overlap, twins
from slurmpre.job.handover.successor import wait_for_predecessor
from slurmpre.job.start import expand, limits
from slurmpre.job.start.args import RunOptions
from slurmpre.job.start.env import JobEnv
from slurmpre.job.start.launch import (
    child_env,
    nproc_for,
    predecessor_timeout,
    takes_over_early,
)
from slurmpre.job.start.rendezvous import port_for
from slurmpre.slurm.client import SlurmClient
from slurmpre.tier import salvage

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class AttemptContext:
    """What a node's wrapper works with through one attempt: its options, the job as
    Slurm describes it, the checkpoint folder and its ledger, and Slurm. What it says, it
    logs (`slurmpre.lines`); the wrapper sends it to the job's log."""

    opts: RunOptions
    job: JobEnv
    folder: Path
    ledger: Ledger
    client: SlurmClient
    env: Mapping[str, str]  # the job's environment, as the wrapper was given it


def task_checkpoint_dir(base: Path, job: JobEnv) -> Path:
    """An array task keeps its own checkpoints: ``<dir>/task-<id>``."""
    return base / f"task-{job.array_task_id}" if job.array_task_id is not None else base


def check_checkpoint_dir(path: Path, job: JobEnv, access: Access) -> Path:
    if not path.is_dir():
        raise CheckpointError(
            f"checkpoint folder {str(path)!r} does not exist (it must be on the shared volume; "
            "`slurmpre submit` creates it)"
        )
    if not os.access(path, os.W_OK | os.X_OK):
        raise CheckpointError(f"checkpoint folder {str(path)!r} is not writable")
    folder = task_checkpoint_dir(path, job)
    try:
        make_dir(folder, access, exist_ok=True)
    except OSError as exc:
        raise CheckpointError(f"cannot create {str(folder)!r}: {exc.strerror}") from None
    return folder


def node_address(client: SlurmClient, node: str) -> str:
    """Node 0's address as Slurm knows it (NodeAddr), not a guessed hostname."""
    try:
        infos = client.nodes([node])
    except SlurmpreError:
        return node
    return (infos[0].address if infos and infos[0].address else None) or node


def attempt_prefix(job: JobEnv) -> str:
    """The start of every in-flight checkpoint name this attempt writes (see api.checkpoint)."""
    return f"{job.tag}-{job.attempt}-"


def wait_for_the_one_before(at: AttemptContext) -> int | None:
    """Before choosing a checkpoint: the job this one takes over from, or the step this
    one started beside, has committed its last checkpoint and ended. With the node-local
    tier, every node first pulls the predecessor's last save from its nodes: the step
    they all hold (None: resume from the folder)."""
    timeout = predecessor_timeout(at.opts)
    pulled = _pull(at, timeout)
    wait_for_predecessor(at.ledger, at.client, at.job, timeout)
    overlap.wait_for_previous_step(at.ledger, at.job, timeout)
    if pulled is None:
        pulled = _pulled_beside(at)
    return pulled if pulled is not None else _adopted(at)


def _pulled_beside(at: AttemptContext) -> int | None:
    """A step started beside the one before it (a hot spare's), with the tier: the step
    before's last save, which its node 0 had every node of this step pull before it ended
    (`tier.in_place`); None when it did not, or the folder holds a newer one (the same
    one: read from the copy on the node all the same, `local.nearest`)."""
    job = at.job
    before = overlap.step_before(job)
    if before is None or not at.env.get(environment.LOCAL_DIR):
        return None
    records = at.ledger.records()
    asked = {r.step for r in records if isinstance(r, PullAsked) and r.job == job.tag
             and r.attempt_id == before.step_after and r.predecessor == job.tag}  # fmt: skip
    done = [r for r in records if isinstance(r, PullDone) and r.job == job.tag
            and r.attempt_id == before and r.step in asked]  # fmt: skip
    if not done or not done[-1].ok:
        return None
    durable = _durable(at)
    return done[-1].step if durable is None or done[-1].step >= durable else None


def _adopted(at: AttemptContext) -> int | None:
    """A restart with the tier (in place, or requeued): the step this attempt's nodes took
    over from what earlier ones left on them, once each holds it (`tier.salvage`)."""
    job = at.job
    if not at.env.get(environment.LOCAL_DIR) or not (job.restart_count or job.in_place):
        return None
    at_id = AttemptId(job.restart_count, job.in_place)
    return salvage.gather(at.ledger, job.tag, at_id, job.nodes, _durable(at))


def _durable(at: AttemptContext) -> int | None:
    """The step of the newest complete checkpoint in the folder."""
    found = checkpoints.latest(at.folder, owners=trust.trusted_uids()).checkpoint
    return found.step if found else None


def _pull(at: AttemptContext, timeout: float) -> int | None:
    predecessor = at.job.predecessor
    first = at.job.restart_count == 0 and at.job.in_place == 0  # a later one: servers gone
    if not predecessor or not first or not at.env.get(environment.LOCAL_DIR):
        return None
    asked = [0.0]

    def ended() -> bool:  # Slurm is asked every few seconds, not at every look
        if time.monotonic() - asked[0] < 2.0:
            return False
        asked[0] = time.monotonic()
        try:
            return at.client.job(predecessor).finished
        except JobNotFound:
            return True
        except SlurmpreError:
            return False

    from slurmpre.tier import handoff  # HMAC and sockets: only for a run with the tier

    return handoff.arrange(
        at.ledger,
        job=at.job.tag,
        attempt=at.job.restart_count,
        predecessor=predecessor,
        nodes=at.job.num_nodes,
        durable=lambda: _durable(at),
        ended=ended,
        timeout=timeout,
    )


def agree(at: AttemptContext) -> Choice:
    """Node 0 chooses the checkpoint for this attempt; the others wait for its choice.

    In a successor that takes over early (`takes_over_early`) the choice names no
    checkpoint yet: node 0 publishes where to meet at once, and its `take_over`
    publishes the checkpoint once the predecessor has ended."""
    opts, job, ledger = at.opts, at.job, at.ledger
    if not job.is_first_node:
        return ledger.wait_choice(job.tag, job.attempt, opts.agree_timeout)
    handed = [r for r in ledger.records() if isinstance(r, Successor) and r.job == job.tag]
    if handed:
        # Requeue=0 keeps Slurm from requeuing it; a requeue by hand still can.
        raise HandedOver(
            f"job {job.tag} handed over to job {handed[-1].successor} in attempt "
            f"{handed[-1].attempt_id}: this attempt does not train beside it"
        )
    twins.claim(ledger, at.client, job)  # a hand-over with a twin: the first trains
    if takes_over_early(opts, job, at.folder):
        early = _choice(at, None, None)
        command_or_give_up(at, early)
        ledger.publish(early, timeout=opts.agree_timeout)
        before = "the step before" if job.releasing else f"job {job.predecessor}"
        LOG.info(f"starting while {before} ends: resume_path() waits for its checkpoint")
        return early
    # A successor: the job it takes over from commits its notice checkpoint and ends
    # within its window; nothing is chosen before that.
    return choose(at, pulled=wait_for_the_one_before(at))


def give_up(at: AttemptContext, why: str, error: SlurmpreError | None = None) -> NoReturn:
    """End the run here: recorded, made non-requeueable, and exit 1 (`limits`), or
    ``error``'s code."""
    job = at.job
    at.ledger.append(
        GaveUp(job=job.tag, attempt=job.restart_count, in_place=job.in_place, why=why),
        timeout=at.opts.agree_timeout,
    )
    try:
        at.client.set_requeue(job.job_id, False)
    except SlurmpreError as exc:
        LOG.info(f"could not make the job non-requeueable: {exc}")
    raise error if error is not None else RestartLimit(f"giving up: {why}")


def command_or_give_up(at: AttemptContext, choice: Choice) -> None:
    """Node 0, before it publishes ``choice``: every variable the command names is set
    in the environment the training would get from it (`expand`). If one is not, the
    run stops here, recorded and not requeued (`give_up`), with the wrapper's exit 2:
    a restart would build the same command again, and fail the same way."""
    training = child_env(at.env, at.opts, at.job, at.folder, choice)
    try:
        expand.command(at.opts.command, training)
    except UsageError as exc:
        give_up(at, str(exc), exc)


def take_over(at: AttemptContext) -> Choice:
    """Node 0 of a successor (or of a step started early) whose training already runs:
    wait for the one before to end, then choose and publish the checkpoint that
    `slurmpre.resume_path()` returns on every rank."""
    return choose(at, resume=True, pulled=wait_for_the_one_before(at))


def _choice(
    at: AttemptContext, ckpt: checkpoints.Checkpoint | None, previous_world_size: int | None
) -> Choice:
    """This attempt's choice: ``ckpt`` (None: from nothing, or not chosen yet), and where
    the nodes meet (torchrun's c10d rendezvous, or MASTER_ADDR/MASTER_PORT)."""
    job = at.job
    port = port_for(job.job_id, job.in_place, job.port_offset)
    return Choice(
        job=job.tag,
        attempt=job.restart_count,
        in_place=job.in_place,
        resume_from=str(ckpt.path) if ckpt else None,
        step=ckpt.step if ckpt else None,
        nodes=job.nodes,
        world_size=job.num_nodes * nproc_for(at.opts, job),
        previous_world_size=previous_world_size,
        rdzv_endpoint=f"{node_address(at.client, job.nodes[0])}:{port}",
        published_at=time.time(),
    )


def choose(at: AttemptContext, *, resume: bool = False, pulled: int | None = None) -> Choice:
    """Clear what dead attempts left, pick the newest complete checkpoint, publish it;
    or give up (`limits`), once every attempt before this one has ended (in a successor,
    after its predecessor: its last attempt may still commit)."""
    opts, job, ledger = at.opts, at.job, at.ledger
    _clear_the_way(at)
    ckpt = _newest(at, pulled)
    previous = ledger.previous_start(job.tag, AttemptId(job.restart_count, job.in_place))
    choice = _choice(at, ckpt, previous.world_size if previous else None)
    if not resume:  # with resume, the training runs already: its command was built
        command_or_give_up(at, choice)
    ledger.publish(choice, timeout=opts.agree_timeout, resume=resume)
    ledger.append(
        Start(
            job=job.tag,
            attempt=job.restart_count,
            in_place=job.in_place,
            nodes=tuple(job.nodes),
            num_nodes=job.num_nodes,
            world_size=choice.world_size,
            resume_from=choice.resume_from,
            step=choice.step,
            code=code_run(at.env),
            spares=job.spares or None,
        ),
        timeout=opts.agree_timeout,
    )
    if ckpt is None:
        LOG.info("no complete checkpoint yet: starting fresh")
    else:
        LOG.info(f"resuming from {ckpt.path} (step {ckpt.step}, {ckpt.reason})")
    return choice


def _clear_the_way(at: AttemptContext) -> None:
    """Before anything runs: the snapshot is the user's and as submitted, no other job
    trains in the folder, and what dead attempts left is published or removed."""
    snapshot = at.env.get(environment.CODE_DIR)
    if snapshot:
        snapshots.verify(Path(snapshot))
    holders = live_holders(at.ledger, at.client, besides=at.job.tag)
    if holders:
        raise JobEnvironmentError(
            f"checkpoint folder {str(at.folder)!r} is in use by {describe(holders)}: refusing "
            "to train over its checkpoints (cancel one of the jobs; a finished job does not block)"
        )
    cleaned = checkpoints.clean_leftovers(at.folder, live=attempt_prefix(at.job))
    for name in cleaned.published:
        LOG.info(f"published {name}: its commit was sealed when a kill stopped it")
    if cleaned.removed:
        names = ", ".join(cleaned.removed)
        LOG.info(f"removed {len(cleaned.removed)} leftover(s) of dead attempts: {names}")


def _newest(at: AttemptContext, pulled: int | None) -> checkpoints.Checkpoint | None:
    """The newest complete checkpoint the user's own jobs committed, or the one every
    node pulled when it is newer (it lands in the folder by this job's flush); gives up
    (`limits`) when the run has restarted too often, or too often without progress."""
    found = checkpoints.latest(at.folder, owners=trust.trusted_uids())
    for line in checkpoints.summarize(found):
        LOG.info(line)
    ckpt = found.checkpoint
    if pulled is not None and (ckpt is None or ckpt.step is None or pulled > ckpt.step):
        where = str(FolderLayout(at.folder).step(pulled))
        pulled_why = f"pulled from job {at.job.predecessor}'s nodes onto every node"
        if overlap.step_before(at.job) is not None:
            pulled_why = "pulled from the nodes of the step before onto every node"
        elif at.job.restart_count or at.job.in_place:
            pulled_why = "taken over on every node from the attempt before, in RAM"
        ckpt = checkpoints.Checkpoint(where, pulled, checkpoints.Format.SLURMPRE, True, pulled_why)
    why = limits.give_up_why(
        at.ledger.records(),
        at.job.tag,
        AttemptId(at.job.restart_count, at.job.in_place),
        ckpt.step if ckpt else None,
        at.job.run_restarts,
        at.opts.limits,
        at.opts.watch.goals.max_preemptions,
    )
    if why is None and at.job.run_restarts:
        why = limits.over_budget(
            at.ledger.records(), time.time(), at.opts.watch.goals.max_cost, at.job.gpus_on_node
        )
    if why is not None:
        give_up(at, why)
    return ckpt


GIT_TIMEOUT = 10.0  # seconds a git command may take at an attempt's start (node 0 only)


def code_run(env: Mapping[str, str]) -> str | None:
    """The code this attempt runs: a snapshot's identity as submitted (it cannot change);
    without one, the submit folder's git commit as it is now, since a restart runs what
    the folder holds by then (the submit's identity when it is no work tree any more,
    or git cannot say within GIT_TIMEOUT)."""
    submitted = env.get(environment.CODE) or None
    if submitted is None or env.get(environment.CODE_DIR):
        return submitted
    state = git_state(Path.cwd(), timeout=GIT_TIMEOUT)
    return submitted if state is None else state.describe()
