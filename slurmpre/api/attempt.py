"""The attempt's facts, as a training script asks them: where to resume, restarts, world
size, ranks, the checkpoint folder (and a successor's wait for its predecessor)."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from slurmpre import arguments, environment
from slurmpre.errors import CheckpointError, SlurmpreError, UsageError
from slurmpre.folder import trust
from slurmpre.folder.access import CONTROL_MODE, Access
from slurmpre.folder.access import from_env as access_from_env
from slurmpre.folder.layout import AttemptFiles, FolderLayout, attempt_key
from slurmpre.folder.ledger import Choice, Ledger
from slurmpre.folder.records import Record, Waiting
from slurmpre.tier import local


def env_of(env: Mapping[str, str] | None) -> Mapping[str, str]:
    arguments.expect(
        "env", env, Mapping, "a mapping of names to values (os.environ)", optional=True
    )
    return os.environ if env is None else env


def resume_path(env: Mapping[str, str] | None = None) -> Path | None:
    """The complete checkpoint this attempt resumes from, or None for a fresh start.

    In a job that takes over from a preempted one (a successor), the training starts
    while its predecessor still trains on its draining node: this call then tells the
    predecessor that this one is ready, and blocks until the predecessor has committed
    its last checkpoint and ended (seconds, at most its preemption window), so that
    the start-up before it overlaps the predecessor's training. Call it once the model
    and data are built, before the first step.
    """
    e = env_of(env)
    _meets_at_resume(e)
    if e.get(environment.RESUME_PENDING):
        choice = taken_over(e)
        near = local.nearest(e.get(environment.LOCAL_DIR), choice.resume_from)
        return Path(near) if near else None
    raw = e.get(environment.RESUME_FROM, "")
    return Path(raw) if raw else None


def resume_step(env: Mapping[str, str] | None = None) -> int | None:
    """The step of `resume_path`'s checkpoint (None for a fresh start); blocks as it does."""
    e = env_of(env)
    _meets_at_resume(e)
    if e.get(environment.RESUME_PENDING):
        return taken_over(e).step
    return environment.number(e, environment.RESUME_STEP)


_marked_resume: set[Path] = set()


def _meets_at_resume(env: Mapping[str, str]) -> None:
    """Mark (once) that this job's script asks for its checkpoint here: its successor may
    then start early and wait in this call (make before break)."""
    files = own_files(env)
    if files is not None and files.meets_at_resume not in _marked_resume:
        mark(files.meets_at_resume)
        _marked_resume.add(files.meets_at_resume)


_taken: dict[tuple[str, str, str], Choice] = {}


def taken_over(env: Mapping[str, str]) -> Choice:
    """A successor's checkpoint, once its predecessor has ended; the first call on rank 0
    records that this training is ready (the predecessor then stops at once)."""
    folder = checkpoint_dir(env)
    tag = env.get(environment.JOB_TAG, "")
    attempt, in_place = own_attempt(env), in_place_of(env)
    key = (str(folder), tag, attempt_key(attempt, in_place))
    if key in _taken:
        return _taken[key]
    predecessor = env[environment.RESUME_PENDING]
    ledger = Ledger(folder, access=access_of(env))
    if ranks(env)[0] == 0:  # unrecorded, the predecessor stops by its deadline
        record(
            ledger,
            Waiting(
                job=tag,
                attempt=attempt,
                in_place=in_place,
                predecessor=predecessor,
                waiting_at=time.time(),
            ),
        )
    timeout = float(env.get(environment.RESUME_TIMEOUT) or 600)
    try:
        choice = ledger.wait_choice(tag, key[2], timeout, resume=True)
    except SlurmpreError as exc:
        raise CheckpointError(
            f"no checkpoint to resume from after waiting {timeout:g} s for job {predecessor}, "
            f"which this job takes over from, to end: {exc}"
        ) from None
    _taken[key] = choice
    return choice


def restart_count(env: Mapping[str, str] | None = None) -> int:
    """0 on the first run, then 1, 2, ... after each restart of the run: Slurm's requeues
    and the hand-overs to successor jobs (an in-place restart is not one)."""
    e = env_of(env)
    run = environment.number(e, environment.RESTARTS)
    return run if run is not None else own_attempt(e)


def own_attempt(env: Mapping[str, str]) -> int:
    """This job's own restart count (Slurm's SLURM_RESTART_COUNT): its records' attempt."""
    return (
        environment.number(env, environment.RESTART_COUNT)
        or environment.number(env, "SLURM_RESTART_COUNT")
        or 0
    )


def in_place_of(env: Mapping[str, str]) -> int:
    """In-place restarts of this attempt so far (set by the batch script's supervisor)."""
    return environment.number(env, environment.IN_PLACE) or 0


def own_files(env: Mapping[str, str]) -> AttemptFiles | None:
    """This attempt's control files, the ones its wrapper names (`JobEnv.files`); None
    outside a slurmpre job (no checkpoint folder or job tag), where nothing is marked
    and no notice comes."""
    folder, tag = env.get(environment.CHECKPOINT_DIR, ""), env.get(environment.JOB_TAG, "")
    if not folder or not tag:
        return None
    attempt = attempt_key(own_attempt(env), in_place_of(env))
    return AttemptFiles(FolderLayout(Path(folder)), tag, attempt)


def world_size(env: Mapping[str, str] | None = None) -> int | None:
    """Processes in this attempt (nodes x processes per node)."""
    return environment.number(env_of(env), environment.WORLD_SIZE)


def previous_world_size(env: Mapping[str, str] | None = None) -> int | None:
    """Processes in the previous attempt, for resharding and keeping the global batch."""
    e = env_of(env)
    if e.get(environment.RESUME_PENDING):
        return taken_over(e).previous_world_size
    return environment.number(e, environment.PREVIOUS_WORLD_SIZE)


def checkpoint_dir(env: Mapping[str, str] | None = None) -> Path:
    raw = env_of(env).get(environment.CHECKPOINT_DIR, "")
    if not raw:
        raise CheckpointError(f"{environment.CHECKPOINT_DIR} is not set: run under `slurmpre run`")
    return Path(raw)


def distributed() -> Any | None:
    """torch.distributed when the script already initialized it; never imports torch."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist
    return None


def ranks(env: Mapping[str, str] | None = None) -> tuple[int, int]:
    """(global rank, world size) of this process.

    From torch.distributed when it is initialized; else from the launcher's
    environment: torchrun's ``RANK``/``WORLD_SIZE``, else srun's
    ``SLURM_PROCID``/``SLURM_NTASKS`` (the plain launcher: one process per node);
    else a single process.
    """
    dist = distributed()
    if dist is not None:
        return int(dist.get_rank()), int(dist.get_world_size())
    e = env_of(env)
    for rank_key, world_key in (("RANK", "WORLD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS")):
        rank, world = environment.number(e, rank_key), environment.number(e, world_key)
        if rank is not None and world is not None:
            if not 0 <= rank < world:
                raise CheckpointError(f"{rank_key}={rank} is not below {world_key}={world}")
            return rank, world
    return 0, 1


def access_of(env: Mapping[str, str]) -> Access:
    try:
        return access_from_env(env)
    except UsageError as exc:
        raise CheckpointError(str(exc)) from None


def mark(path: Path) -> None:
    with contextlib.suppress(OSError, SlurmpreError):  # a mark is a hint to the watcher
        trust.create(path, CONTROL_MODE)


def record(ledger: Ledger, entry: Record) -> None:
    """Append ``entry``; a ledger that cannot be written is said in one line, never raised:
    the record is the watcher's hint, and the training goes on without it."""
    try:
        ledger.append(entry)
    except CheckpointError as exc:
        print(f"slurmpre: {exc}", file=sys.stderr, flush=True)
