"""What training scripts import: where to resume, restart facts, and an atomic checkpoint.

Light on purpose (no click, no jinja2, no torch at import): every rank imports it.

    import slurmpre
    if (path := slurmpre.resume_path()) is not None:
        load(path)
    ...
    with slurmpre.checkpoint(step) as path:
        save(path)  # every rank, e.g. torch.distributed.checkpoint.save(..., checkpoint_id=path)
    slurmpre.committed(path_the_framework_saved)  # or: a framework saved by itself
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from slurmpre import arguments, environment
from slurmpre.defaults import CHECKPOINT_TIMEOUT
from slurmpre.errors import CheckpointError, SlurmpreError, UsageError
from slurmpre.folder import checkpoints, trust
from slurmpre.folder.access import CONTROL_MODE, Access, make_dir, make_dirs
from slurmpre.folder.access import from_env as access_from_env
from slurmpre.folder.layout import attempt_key
from slurmpre.folder.ledger import Choice, Ledger
from slurmpre.folder.locks import LockTimeout
from slurmpre.folder.records import Checkpoint, Waiting
from slurmpre.job.meeting import Alone, FolderMeeting, Meeting, TorchMeeting, device
from slurmpre.job.watch.notice import CHECKPOINT, STOP, Agree, NoticeGate


def _env(env: Mapping[str, str] | None) -> Mapping[str, str]:
    arguments.environment("env", env)
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
    e = _env(env)
    _meets_at_resume(e)
    if e.get(environment.RESUME_PENDING):
        choice = _taken_over(e)
        return Path(choice.resume_from) if choice.resume_from else None
    raw = e.get(environment.RESUME_FROM, "")
    return Path(raw) if raw else None


def resume_step(env: Mapping[str, str] | None = None) -> int | None:
    """The step of `resume_path`'s checkpoint (None for a fresh start); blocks as it does."""
    e = _env(env)
    _meets_at_resume(e)
    if e.get(environment.RESUME_PENDING):
        return _taken_over(e).step
    return environment.number(e, environment.RESUME_STEP)


_marked_resume: set[str] = set()


def _meets_at_resume(env: Mapping[str, str]) -> None:
    """Mark (once) that this job's script asks for its checkpoint here: its successor may
    then start early and wait in this call (make before break)."""
    path = env.get(environment.MEETS_AT_RESUME_FILE, "")
    if path and path not in _marked_resume:
        _mark(env, environment.MEETS_AT_RESUME_FILE)
        _marked_resume.add(path)


_taken: dict[tuple[str, str, str], Choice] = {}


def _taken_over(env: Mapping[str, str]) -> Choice:
    """A successor's checkpoint, once its predecessor has ended; the first call on rank 0
    records that this training is ready (the predecessor then stops at once)."""
    folder = checkpoint_dir(env)
    tag = env.get(environment.JOB_TAG, "")
    attempt, in_place = _attempt(env), _in_place(env)
    key = (str(folder), tag, attempt_key(attempt, in_place))
    if key in _taken:
        return _taken[key]
    predecessor = env[environment.RESUME_PENDING]
    ledger = Ledger(folder, access=_access(env))
    if ranks(env)[0] == 0:
        try:
            ledger.append(
                Waiting(
                    job=tag,
                    attempt=attempt,
                    in_place=in_place,
                    predecessor=predecessor,
                    waiting_at=time.time(),
                )
            )
        except CheckpointError as exc:  # the predecessor then stops by its deadline
            print(f"slurmpre: {exc}", file=sys.stderr, flush=True)
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
    e = _env(env)
    run = environment.number(e, environment.RESTARTS)
    return run if run is not None else _attempt(e)


def _attempt(env: Mapping[str, str]) -> int:
    """This job's own restart count (Slurm's SLURM_RESTART_COUNT): its records' attempt."""
    return (
        environment.number(env, environment.RESTART_COUNT)
        or environment.number(env, "SLURM_RESTART_COUNT")
        or 0
    )


def _in_place(env: Mapping[str, str]) -> int:
    """In-place restarts of this attempt so far (set by the batch script's supervisor)."""
    return environment.number(env, environment.IN_PLACE) or 0


def world_size(env: Mapping[str, str] | None = None) -> int | None:
    """Processes in this attempt (nodes x processes per node)."""
    return environment.number(_env(env), environment.WORLD_SIZE)


def previous_world_size(env: Mapping[str, str] | None = None) -> int | None:
    """Processes in the previous attempt, for resharding and keeping the global batch."""
    e = _env(env)
    if e.get(environment.RESUME_PENDING):
        return _taken_over(e).previous_world_size
    return environment.number(e, environment.PREVIOUS_WORLD_SIZE)


def checkpoint_dir(env: Mapping[str, str] | None = None) -> Path:
    raw = _env(env).get(environment.CHECKPOINT_DIR, "")
    if not raw:
        raise CheckpointError(f"{environment.CHECKPOINT_DIR} is not set: run under `slurmpre run`")
    return Path(raw)


def _distributed() -> Any | None:
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
    dist = _distributed()
    if dist is not None:
        return int(dist.get_rank()), int(dist.get_world_size())
    e = _env(env)
    for rank_key, world_key in (("RANK", "WORLD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS")):
        rank, world = environment.number(e, rank_key), environment.number(e, world_key)
        if rank is not None and world is not None:
            if not 0 <= rank < world:
                raise CheckpointError(f"{rank_key}={rank} is not below {world_key}={world}")
            return rank, world
    return 0, 1


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
        attempt_key(_attempt(env), _in_place(env)),
    ]
    for short, name in (("s", "SLURM_STEP_ID"), ("r", "TORCHELASTIC_RESTART_COUNT")):
        if env.get(name):
            parts.append(f"{short}{env[name]}")
    parts.append(f"n{_sequence[key]}")
    return "-".join(parts)


@contextlib.contextmanager
def checkpoint(
    step: int, folder: str | Path | None = None, *, timeout: float = CHECKPOINT_TIMEOUT
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
    or overwrites a complete checkpoint; an empty one is refused.
    """
    checkpoints.check_step(step)
    arguments.expect("folder", folder, arguments.PATH, "a folder's path", optional=True)
    arguments.seconds("timeout", timeout)
    if not timeout > 0:
        raise CheckpointError(f"checkpoint timeout must be more than 0 seconds, got {timeout!r}")
    target = Path(folder) if folder is not None else checkpoint_dir()
    env = os.environ
    if env.get(environment.RESUME_PENDING):
        _taken_over(env)  # never write beside a predecessor that still trains
    dist = _distributed()
    rank, world = ranks(env)
    tag = _attempt_tag(env, target)
    incoming = checkpoints.incoming_path(target, step, tag)
    access = _access(env)
    with _writing(target, access, rank, timeout):
        yield from _write(target, step, env, dist, rank, world, tag, incoming, access, timeout)


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


def _write(
    target: Path,
    step: int,
    env: Mapping[str, str],
    dist: Any,
    rank: int,
    world: int,
    tag: str,
    incoming: Path,
    access: Access,
    timeout: float,
) -> Iterator[Path]:
    began = time.time()
    try:
        make_dirs(target, access)
        make_dir(incoming, access, exist_ok=True)  # every rank may be first
    except OSError as exc:
        raise CheckpointError(f"cannot create {str(incoming)!r}: {exc.strerror}") from None
    if dist is not None:
        meet: Meeting = TorchMeeting(dist)
    elif world > 1:
        meet = FolderMeeting(checkpoints.sync_path(incoming), rank, world, timeout, access)
    else:
        meet = Alone()
    try:
        yield incoming
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


def _access(env: Mapping[str, str]) -> Access:
    try:
        return access_from_env(env)
    except UsageError as exc:
        raise CheckpointError(str(exc)) from None


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
    # The watcher requeues once it sees this: a checkpoint newer than the notice.
    try:
        Ledger(target, access=access).append(
            Checkpoint(
                job=env[environment.JOB_TAG],
                attempt=_attempt(env),
                in_place=_in_place(env),
                step=step,
                path=str(final),
                after_notice=_gate.agreed,
                # Writing and committing it (`slurmpre plan`); unknown for another's save.
                seconds=None if seconds is None else round(seconds, 3),
            )
        )
    except CheckpointError as exc:
        # The checkpoint is committed and will be found; only the early requeue is lost.
        print(f"slurmpre: {exc}", file=sys.stderr, flush=True)


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
    e = _env(env)
    target = checkpoint_dir(e)
    if e.get(environment.RESUME_PENDING):
        _taken_over(e)
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
        _record_commit(e, target, step, where, _access(e), None)
    return where


_gate = NoticeGate(lambda: os.environ.get(environment.NOTICE_FILE, ""))


@functools.cache
def _torch_agree(dist: Any) -> Agree:
    """The agreement collective, built once (it is asked for on every step)."""
    torch = sys.modules["torch"]
    where = device(dist)

    def agree(flag: int, every: int) -> tuple[int, int]:
        # One small all_reduce: MAX of the flags, and MIN of the proposals (as MAX of -x).
        both = torch.tensor([flag, -every], dtype=torch.int64, device=where)
        dist.all_reduce(both, op=dist.ReduceOp.MAX)
        return int(both[0].item()), -int(both[1].item())

    return agree


def _gate_for(env: Mapping[str, str] | None) -> NoticeGate:
    return _gate if env is None else NoticeGate(lambda: env.get(environment.NOTICE_FILE, ""))


def _level(gate: NoticeGate, env: Mapping[str, str] | None, mark: str) -> tuple[int, bool]:
    """The notice level all ranks agree on now, and whether this is the first rank
    (which leaves the script's marks); ``mark`` is the mark this call leaves once."""
    dist = _distributed()
    first_rank = dist is None or dist.get_rank() == 0
    if first_rank and mark not in gate.marked:
        # The watcher then waits for the checkpoint this script takes on the notice,
        # not for a periodic one that happens to land first.
        _mark(_env(env), mark)
        gate.marked.add(mark)
    return gate.agree(None if dist is None else _torch_agree(dist)), first_rank


def preemption_requested(env: Mapping[str, str] | None = None) -> bool:
    """True once the job must checkpoint now and stop: its node is being preempted (or
    time runs out).

    Call it once per step on every rank. When torch.distributed is initialized
    all ranks agree through one small all_reduce, so they all see True at the
    same step and a collective checkpoint cannot deadlock or mix steps; the
    all_reduce runs about once a second of steps, not every step, so it costs
    next to nothing (see slurmpre.job.watch.notice.NoticeGate):

        if slurmpre.preemption_requested():
            with slurmpre.checkpoint(step) as path:
                save(path)
            break  # slurmpre restarts the job once the checkpoint has committed

    A script that also asks `checkpoint_requested()` is told to stop later: when the
    job that takes over is ready, or as the draining node's deadline nears.
    """
    gate = _gate_for(env)
    level, first_rank = _level(gate, env, environment.LISTENING_FILE)
    gate.stop_asked = True
    answer = level >= (STOP if gate.goes_on else CHECKPOINT)
    if answer and first_rank and environment.TAKEN_FILE not in gate.marked:
        # The script stops on this notice: its exit is not the end of its work.
        _mark(_env(env), environment.TAKEN_FILE)
        gate.marked.add(environment.TAKEN_FILE)
    return answer


def checkpoint_requested(env: Mapping[str, str] | None = None) -> bool:
    """True, once, at the step where the job must checkpoint and may then go on training.

    Scripts that can save and keep training ask this beside `preemption_requested()`,
    on every rank and every step, this one first:

        if slurmpre.checkpoint_requested():      # a notice: save now, and go on
            save_checkpoint(step)
        if slurmpre.preemption_requested():      # time to stop: save (again) and exit
            save_checkpoint(step)                # (skip it if this step was just saved)
            break

    On a drain, the notice checkpoint is taken at once (a node can go before its
    window ends); the script then trains on while a successor job starts up on
    another node, and `preemption_requested()` turns True when that successor is
    ready (it waits in `resume_path()`) or as the deadline nears (window, less the
    margin, less the measured checkpoint time), whichever comes first. Where no
    successor is on its way (an in-place restart, a requeue) both turn True at once.
    """
    gate = _gate_for(env)
    gate.goes_on = True
    level, _ = _level(gate, env, environment.GOES_ON_FILE)
    if gate.checkpoint_answered or level < CHECKPOINT:
        return False
    if level >= STOP and gate.stop_asked:
        return False  # preemption_requested() answers this notice: one save, not two
    gate.checkpoint_answered = True
    return True


def _mark(env: Mapping[str, str], key: str) -> None:
    path = env.get(key, "")
    if path:
        with contextlib.suppress(OSError, SlurmpreError):  # a mark is a hint to the watcher
            trust.create(Path(path), CONTROL_MODE)
