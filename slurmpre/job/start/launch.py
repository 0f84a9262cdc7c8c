"""What a node starts for an attempt: the launcher's command line around the command,
whose ``$NAME`` are expanded from the training's environment (`expand`), and that
environment, the job's with what slurmpre tells the training (`slurmpre.environment`)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from slurmpre import environment, launchers
from slurmpre.errors import UsageError
from slurmpre.folder import trust
from slurmpre.folder.layout import FolderLayout
from slurmpre.folder.ledger import Choice
from slurmpre.job.start import expand
from slurmpre.job.start.args import RunOptions
from slurmpre.job.start.env import JobEnv
from slurmpre.job.start.rendezvous import Rendezvous, accelerate_argv, torchrun_argv
from slurmpre.launchers import Launcher
from slurmpre.tier import local


def check_command(command: Sequence[str], env: Mapping[str, str]) -> None:
    """The program the command names is on this node (before anything is chosen)."""
    exe = command[0]
    if "$" in exe:
        try:
            exe = expand.command([exe], env)[0]
        except UsageError:
            return  # node 0 says why before it chooses (`resume.command_or_give_up`)
    found = shutil.which(exe) if os.sep not in exe else (exe if os.access(exe, os.X_OK) else None)
    if found is None and not (exe.endswith(".py") and Path(exe).is_file()):
        raise UsageError(f"command not found: {exe!r}")


# Beyond the predecessor's window: its wrapper's teardown and Slurm's end of the job.
PREDECESSOR_GRACE = 60.0


def nproc_for(opts: RunOptions, job: JobEnv) -> int:
    return opts.nproc_per_node or job.gpus_on_node or 1


def takes_over_early(opts: RunOptions, job: JobEnv, folder: Path) -> bool:
    """A successor (or a step started beside the step before: `overlap`) starts its
    training before the one before has ended, and `slurmpre.resume_path()` waits for the
    checkpoint. Only for a script that meets it there (its run asked `resume_path()`),
    not with ``resume_arg``: a script that finds its checkpoint by itself would load one,
    and train, while the one before still does."""
    before = waits_for(job)
    if not before or opts.resume_arg:
        return False
    return trust.marked(FolderLayout(folder).meets_at_resume(before))


def waits_for(job: JobEnv) -> str | None:
    """Whose end this attempt's training waits for in `resume_path()`: this job's own, in
    a step started beside the step before (`overlap`; a successor's too: its predecessor
    ended long ago); else the job it takes over from, if any."""
    return job.tag if job.releasing else job.predecessor


def predecessor_timeout(opts: RunOptions) -> float:
    """How long a successor waits for its predecessor to end: its whole window, and more."""
    return opts.watch.window + PREDECESSOR_GRACE


def launch(
    opts: RunOptions, job: JobEnv, choice: Choice, env: Mapping[str, str], folder: Path
) -> tuple[list[str], dict[str, str]]:
    """What this node starts for ``choice``: the launcher's command line, and the
    training's environment, from which the command's ``$NAME`` are expanded (`expand`)
    before the launcher's options and ``resume_arg`` go around it."""
    training = child_env(env, opts, job, folder, choice)
    command = expand.command(opts.command, training)
    return child_command(opts, job, choice, env, command), training


def child_command(
    opts: RunOptions, job: JobEnv, choice: Choice, env: Mapping[str, str], command: list[str]
) -> list[str]:
    """The launcher's command line around ``command`` (the spec's, expanded: `launch`)."""
    if opts.resume_arg and choice.resume_from:
        near = local.nearest(env.get(environment.LOCAL_DIR), choice.resume_from)
        command += [opts.resume_arg, near or choice.resume_from]
    if opts.launcher == Launcher.PLAIN:
        return command
    host, _, port = choice.rdzv_endpoint.rpartition(":")
    rdzv = Rendezvous(
        host=host,
        port=int(port),
        run_id=f"{job.tag}-{job.attempt}",
        nnodes=job.num_nodes,
        nproc_per_node=nproc_for(opts, job),
        node_rank=job.node_id,
    )
    if opts.launcher == Launcher.ACCELERATE:
        return accelerate_argv(command, rdzv, env, opts.accelerate_config)
    return torchrun_argv(command, rdzv)


def child_env(
    env: Mapping[str, str], opts: RunOptions, job: JobEnv, folder: Path, choice: Choice
) -> dict[str, str]:
    """What the training process sees, on top of the job's own environment."""
    training = environment.Training(
        checkpoint_dir=str(folder),
        resume_from=local.nearest(env.get(environment.LOCAL_DIR), choice.resume_from),
        resume_step=choice.step,
        restart_count=job.restart_count,
        restarts=job.run_restarts,
        job_tag=job.tag,
        world_size=choice.world_size,
        previous_world_size=choice.previous_world_size,
        file_access=opts.file_access.name,
    )
    out = {**env, **training.to_env()}
    out.pop(environment.RESUME_PENDING, None)
    if takes_over_early(opts, job, folder):
        out[environment.RESUME_PENDING] = str(waits_for(job))
        out[environment.RESUME_TIMEOUT] = str(predecessor_timeout(opts) + opts.agree_timeout)
    if opts.launcher == Launcher.ACCELERATE and job.gpus_on_node == 0:
        # Slurm gave this node no GPU: Accelerate must be told, or each process counts
        # itself alone (DistributedType.NO) inside a torch.distributed world of many.
        out.setdefault("ACCELERATE_USE_CPU", "true")
    if opts.launcher == Launcher.PLAIN and choice.rdzv_endpoint:
        # One process per node: what torch.distributed's env:// needs, so a script (or
        # a launcher of its own) can meet the other nodes. A value the job set wins.
        host, _, port = choice.rdzv_endpoint.rpartition(":")
        rank, nodes = str(job.node_id), str(job.num_nodes)
        values = (host, port, rank, rank, nodes, "0", "1")
        for key, value in zip(launchers.PLAIN_ENV, values, strict=True):
            out.setdefault(key, value)
    return out
