"""An atomic checkpoint every rank writes (`checkpoint`), and a framework's own save
reported (`committed`): the commit, and the record the watcher acts on."""

from __future__ import annotations

import contextlib
import shutil
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurmpre import arguments, environment
from slurmpre.api import notices
from slurmpre.api.attempt import (
    access_of,
    checkpoint_dir,
    distributed,
    env_of,
    in_place_of,
    own_attempt,
    ranks,
    record,
    taken_over,
)
from slurmpre.api.batching import ElasticSampler
from slurmpre.api.meeting import Alone, FolderMeeting, Meeting, TorchMeeting
from slurmpre.defaults import CHECKPOINT_TIMEOUT
from slurmpre.errors import CheckpointError, UsageError
from slurmpre.folder import checkpoints
from slurmpre.folder.access import OWNER, Access, make_dir, make_dirs
from slurmpre.folder.layout import attempt_key
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.locks import LockTimeout
from slurmpre.folder.records import Checkpoint, Saved
from slurmpre.tier import local

_sequence: dict[str, int] = {}


def _attempt_tag(env: Mapping[str, str], folder: Path) -> str:
    """A name for one checkpoint call that every rank computes alike and no other call shares.

    Ranks call `checkpoint` collectively and in the same order, so the n-th
    call of this launch is the same checkpoint on every rank; the launch is
    the job, its restart, the srun step and torchrun's own restart count.
    """
    key = str(folder)
    _sequence[key] = _sequence.get(key, 0) + 1
    parts = [
        env.get(environment.JOB_TAG) or "local",
        attempt_key(own_attempt(env), in_place_of(env)),
    ]
    for short, name in (("s", "SLURM_STEP_ID"), ("r", "TORCHELASTIC_RESTART_COUNT")):
        if env.get(name):
            parts.append(f"{short}{env[name]}")
    parts.append(f"n{_sequence[key]}")
    return "-".join(parts)


@contextlib.contextmanager
def checkpoint(
    step: int,
    folder: str | Path | None = None,
    *,
    timeout: float = CHECKPOINT_TIMEOUT,
    sampler: ElasticSampler | None = None,
) -> Iterator[Path]:
    """Write a checkpoint of ``step`` atomically; call it on every rank.

    Yields a hidden folder to write into (the same on every rank). When the
    block ends without an exception on every rank, global rank 0 fsyncs, writes
    the commit marker and renames the folder to ``step-NNNNNNNN``: a kill at any
    instant leaves either the previous state or a complete new checkpoint.
    Ranks meet through torch.distributed when it is initialized, otherwise
    through marks in the shared folder (each waits at most ``timeout`` seconds).
    An exception on any rank aborts the checkpoint on every rank (the others
    raise CheckpointError) and leaves the previous one the latest. Never deletes
    or overwrites a complete checkpoint; an empty one is refused. ``sampler``: an
    `ElasticSampler` whose state rank 0 keeps in the checkpoint (`ElasticSampler.resume`).
    """
    checkpoints.check_step(step)
    arguments.expect("folder", folder, arguments.PATH, "a folder's path", optional=True)
    arguments.seconds("timeout", timeout)
    if sampler is not None and not isinstance(sampler, ElasticSampler):
        raise UsageError(f"sampler={sampler!r}: must be a slurmpre.ElasticSampler, or None")
    if not timeout > 0:
        raise CheckpointError(f"checkpoint timeout must be more than 0 seconds, got {timeout!r}")
    target = Path(folder) if folder is not None else checkpoint_dir()
    env = env_of(None)
    if env.get(environment.RESUME_PENDING):
        taken_over(env)  # never write beside a predecessor that still trains
    dist = distributed()
    rank, world = ranks(env)
    tag = _attempt_tag(env, target)
    incoming = checkpoints.incoming_path(target, step, tag)
    access = access_of(env)
    # Only inside a job with local_dir on. The wrapper's flush commits into the job's
    # checkpoint folder: a save to another folder (``folder=``) goes there directly.
    mine = bool(env.get(environment.LOCAL_NODE)) and (
        folder is None or Path(folder) == checkpoint_dir()
    )
    run = _local_run(env, dist, world, step) if mine else None
    if run is not None:  # the node first; the wrapper's flush commits it here later
        where = _Where(target, step, local.incoming(run, step, tag), access, timeout)
        yield from _write_local(where, run, env, dist, rank, sampler)
        return
    with _writing(target, access, rank, timeout):
        where = _Where(target, step, incoming, access, timeout)
        yield from _write(where, env, dist, rank, world, sampler)


@contextlib.contextmanager
def _writing(target: Path, access: Access, rank: int, timeout: float) -> Iterator[None]:
    """Rank 0 holds the folder's writing lock from the first byte to the commit, so
    `slurmpre ckpt prune` never decides while a checkpoint is being written."""
    ledger = Ledger(target, access=access)
    if rank != 0 or not ledger.dir.is_dir():
        yield
        return
    try:
        lock = ledger.writing_lock(timeout)
        lock.acquire()
    except LockTimeout:
        raise CheckpointError(
            f"could not take {ledger.layout.writing_lock} within {timeout:g} s "
            "(is `slurmpre ckpt prune` stuck?)"
        ) from None
    except OSError as exc:
        raise CheckpointError(f"cannot lock {ledger.dir}: {exc.strerror or exc}") from None
    try:
        yield
    finally:
        lock.release()


@dataclass(frozen=True)
class _Where:
    """The checkpoint being written: its folder, step and in-flight name."""

    target: Path
    step: int
    incoming: Path
    access: Access
    timeout: float


def _write(
    where: _Where,
    env: Mapping[str, str],
    dist: Any,
    rank: int,
    world: int,
    sampler: ElasticSampler | None,
) -> Iterator[Path]:
    target, step, incoming, access = where.target, where.step, where.incoming, where.access
    began = time.time()
    try:
        make_dirs(target, access)
        make_dir(incoming, access, exist_ok=True)  # every rank may be first
    except OSError as exc:
        raise CheckpointError(f"cannot create {str(incoming)!r}: {exc.strerror}") from None
    if dist is not None:
        meet: Meeting = TorchMeeting(dist)
    elif world > 1:
        meet = FolderMeeting(checkpoints.sync_path(incoming), rank, world, where.timeout, access)
    else:
        meet = Alone()
    try:
        yield incoming
        if sampler is not None and rank == 0:
            sampler.save(incoming)
    except BaseException as exc:
        meet.failed(exc)
        raise
    meet.written()
    final = None
    if rank == 0:
        try:
            final = checkpoints.commit(incoming, target, step, access=access)
        except BaseException as exc:
            meet.verdict(None, exc)
            raise
        _record_commit(env, target, step, final, access, time.time() - began)
    meet.verdict(final, None)


def _local_run(env: Mapping[str, str], dist: Any, world: int, step: int) -> Path | None:
    """The run's node-local folder when the wrapper gave one (`local_dir`) and it has room
    for one more checkpoint as big as the last on every node; else None: the shared
    folder, as without it, said in one line. Every rank decides alike (one all_reduce):
    ranks without a process group cannot agree, and write to the shared folder."""
    raw = env.get(environment.LOCAL_DIR, "")
    if dist is None and (not raw or world > 1):
        return None
    run = Path(raw)
    why = local.room_for_one_more(run) if raw else "this node has no node-local folder"
    if dist is not None:  # every rank, with a folder or not: one all_reduce each
        agreed = TorchMeeting(dist).all_agree(why is None)
        if why is None and not agreed:
            why = "another node's local folder has no room for it"
        if not raw and not agreed:
            return None  # said by the nodes that have one
    if why is None:
        return run
    line = f"slurmpre: step {step} goes to the checkpoint folder: {why}"
    print(line, file=sys.stderr, flush=True)
    return None


def _write_local(
    where: _Where,
    run: Path,
    env: Mapping[str, str],
    dist: Any,
    rank: int,
    sampler: ElasticSampler | None,
) -> Iterator[Path]:
    """Every rank writes into its node's local folder; each node's first rank seals its
    part there (`slurmpre.tier.local.seal`); rank 0 records the save."""
    began = time.time()
    try:
        make_dir(where.incoming, OWNER, exist_ok=True)  # every rank of the node may be first
    except OSError as exc:
        raise CheckpointError(f"cannot create {str(where.incoming)!r}: {exc.strerror}") from None
    meet: Meeting = TorchMeeting(dist) if dist is not None else Alone()
    try:
        yield where.incoming
        if sampler is not None and rank == 0:
            sampler.save(where.incoming)
    except BaseException as exc:
        meet.failed(exc)
        if environment.number(env, "LOCAL_RANK") in (None, 0):  # no save in flight any more
            shutil.rmtree(where.incoming, ignore_errors=True)
        raise
    meet.written()
    sealed, error = None, None
    if environment.number(env, "LOCAL_RANK") in (None, 0):
        seconds = round(time.time() - began, 3)
        meta = {
            "job": env.get(environment.JOB_TAG) or None,
            "attempt": own_attempt(env),
            "in_place": in_place_of(env),
            "after_notice": notices.gate_for(env).agreed,
            "stopping": notices.stopping(env) or None,
            "seconds": seconds,
            **local.node_of(env.get(environment.LOCAL_NODE, "")),
        }
        try:
            sealed = local.seal(where.incoming, run, where.step, meta)
        except OSError as exc:
            error = CheckpointError(f"cannot seal {str(where.incoming)!r}: {exc.strerror or exc}")
    meet.verdict(sealed, error)
    if error is not None:
        raise error
    if rank == 0 and sealed is not None and env.get(environment.JOB_TAG):
        saved = Saved(
            job=env[environment.JOB_TAG],
            attempt=own_attempt(env),
            in_place=in_place_of(env),
            step=where.step,
            path=str(sealed),
            seconds=round(time.time() - began, 3),
            after_notice=notices.gate_for(env).agreed,
        )
        record(Ledger(where.target, access=where.access), saved)


def _record_commit(
    env: Mapping[str, str],
    target: Path,
    step: int,
    final: Path,
    access: Access,
    seconds: float | None,
) -> None:
    if not env.get(environment.JOB_TAG):
        return
    # The watcher requeues once it sees this: a checkpoint newer than the notice. Unrecorded,
    # the checkpoint is committed and will be found; only the early requeue is lost.
    entry = Checkpoint(
        job=env[environment.JOB_TAG],
        attempt=own_attempt(env),
        in_place=in_place_of(env),
        step=step,
        path=str(final),
        after_notice=notices.gate_for(env).agreed,
        # Writing and committing it (`slurmpre plan`); unknown for another's save.
        seconds=None if seconds is None else round(seconds, 3),
        stopping=notices.stopping(env) or None,
    )
    record(Ledger(target, access=access), entry)


def committed(
    path: str | Path, step: int | None = None, env: Mapping[str, str] | None = None
) -> Path:
    """Report a checkpoint that something else wrote (a framework's own save), once complete.

    For scripts whose framework saves by itself (the Hugging Face Trainer, Lightning,
    Accelerate): after its save on the notice, this tells slurmpre's watcher, which
    then requeues the job at once instead of waiting for the deadline. Call it on
    every rank or on rank 0 alone; rank 0 records it. The checkpoint must sit in the
    job's checkpoint folder, where the next attempt looks, and be complete by its
    layout's rule (the resolver's); otherwise a CheckpointError says why, and nothing
    is recorded. Returns the checkpoint's path.
    """
    arguments.expect("path", path, arguments.PATH, "a checkpoint's path")
    arguments.count("step", step, optional=True)
    e = env_of(env)
    target = checkpoint_dir(e)
    if e.get(environment.RESUME_PENDING):
        taken_over(e)
    judged = checkpoints.judge(path, target)  # a CheckpointError if it does not exist
    where = Path(judged.where)
    if not checkpoints.findable(target, where):
        raise CheckpointError(
            f"{str(path)!r} is not in the checkpoint folder {str(target)!r}: "
            "the next attempt would not find it"
        )
    if not judged.complete:
        raise CheckpointError(f"{str(path)!r} is not a complete checkpoint: {judged.reason}")
    if step is None:
        step = judged.step
    if step is None:
        raise CheckpointError(f"{str(path)!r} names no step: pass step=")
    checkpoints.check_step(step)
    if ranks(e)[0] == 0:
        _record_commit(e, target, step, where, access_of(e), None)
    return where
