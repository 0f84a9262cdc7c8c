"""What training scripts import: where to resume, restart facts, and an atomic checkpoint.

Light on purpose (no click, no jinja2, no torch at import): every rank imports it.

    import slurmpre
    if (path := slurmpre.resume_path()) is not None:
        load(path)
    ...
    with slurmpre.checkpoint(step) as path:
        save(path)  # every rank, e.g. torch.distributed.checkpoint.save(..., checkpoint_id=path)
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from slurmpre.errors import CheckpointError
from slurmpre.job import checkpoints
from slurmpre.job.ledger import Ledger
from slurmpre.job.notice import Agree, NoticeGate


def _env(env: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if env is None else env


def _int(env: Mapping[str, str], key: str) -> int | None:
    raw = env.get(key, "")
    return int(raw) if raw.strip().isdigit() else None


def resume_path(env: Mapping[str, str] | None = None) -> Path | None:
    """The complete checkpoint this attempt resumes from, or None for a fresh start."""
    raw = _env(env).get("SLURMPRE_RESUME_FROM", "")
    return Path(raw) if raw else None


def resume_step(env: Mapping[str, str] | None = None) -> int | None:
    return _int(_env(env), "SLURMPRE_RESUME_STEP")


def restart_count(env: Mapping[str, str] | None = None) -> int:
    """0 on the first run, then 1, 2, ... after each requeue (Slurm's SLURM_RESTART_COUNT)."""
    e = _env(env)
    return _int(e, "SLURMPRE_RESTART_COUNT") or _int(e, "SLURM_RESTART_COUNT") or 0


def world_size(env: Mapping[str, str] | None = None) -> int | None:
    """Processes in this attempt (nodes x processes per node)."""
    return _int(_env(env), "SLURMPRE_WORLD_SIZE")


def previous_world_size(env: Mapping[str, str] | None = None) -> int | None:
    """Processes in the previous attempt, for resharding and keeping the global batch."""
    return _int(_env(env), "SLURMPRE_PREVIOUS_WORLD_SIZE")


def checkpoint_dir(env: Mapping[str, str] | None = None) -> Path:
    raw = _env(env).get("SLURMPRE_CHECKPOINT_DIR", "")
    if not raw:
        raise CheckpointError("SLURMPRE_CHECKPOINT_DIR is not set: run under `slurmpre run`")
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


@contextlib.contextmanager
def checkpoint(step: int, folder: str | Path | None = None) -> Iterator[Path]:
    """Write a checkpoint of ``step`` atomically; call it on every rank.

    Yields an empty hidden folder to write into. When the block ends without an
    exception on every rank, rank 0 fsyncs, writes the commit marker and renames
    the folder to ``step-NNNNNNNN``: a kill at any instant leaves either the
    previous state or a complete new checkpoint. Never deletes or overwrites a
    complete checkpoint.
    """
    if step < 0:
        raise CheckpointError(f"checkpoint step must be 0 or more, got {step}")
    target = Path(folder) if folder is not None else checkpoint_dir()
    env = os.environ
    tag = f"{env.get('SLURMPRE_JOB_TAG', 'local')}-{restart_count()}"
    dist = _distributed()
    rank0 = dist is None or dist.get_rank() == 0
    if rank0:
        target.mkdir(parents=True, exist_ok=True)
        checkpoints.fresh_incoming(target, step, tag)
    if dist is not None:
        dist.barrier()
    incoming = checkpoints.incoming_path(target, step, tag)
    yield incoming
    if dist is not None:
        dist.barrier()
    if rank0:
        final = checkpoints.commit(incoming, target, step)
        if env.get("SLURMPRE_JOB_TAG"):
            # The watcher requeues once it sees this: a checkpoint newer than the notice.
            Ledger(target).append(
                {
                    "event": "checkpoint",
                    "job": env["SLURMPRE_JOB_TAG"],
                    "attempt": restart_count(),
                    "step": step,
                    "path": str(final),
                    "after_notice": _gate.agreed,
                }
            )
    if dist is not None:
        dist.barrier()


_gate = NoticeGate(lambda: os.environ.get("SLURMPRE_NOTICE_FILE", ""))


@functools.cache
def _torch_agree(dist: Any) -> Agree:
    """The agreement collective, built once (it is asked for on every step)."""
    torch = sys.modules["torch"]
    device = (
        torch.device("cuda", torch.cuda.current_device())
        if dist.get_backend() == "nccl"
        else torch.device("cpu")
    )

    def agree(flag: int, every: int) -> tuple[int, int]:
        # One small all_reduce: MAX of the flags, and MIN of the proposals (as MAX of -x).
        both = torch.tensor([flag, -every], dtype=torch.int64, device=device)
        dist.all_reduce(both, op=dist.ReduceOp.MAX)
        return int(both[0].item()), -int(both[1].item())

    return agree


def preemption_requested(env: Mapping[str, str] | None = None) -> bool:
    """True once the job must checkpoint now: its node is being preempted (or time runs out).

    Call it once per step on every rank. When torch.distributed is initialized
    all ranks agree through one small all_reduce, so they all see True at the
    same step and a collective checkpoint cannot deadlock or mix steps; the
    all_reduce runs about once a second of steps, not every step, so it costs
    next to nothing (see slurmpre.job.notice.NoticeGate):

        if slurmpre.preemption_requested():
            with slurmpre.checkpoint(step) as path:
                save(path)
            break  # slurmpre requeues the job once the checkpoint has committed
    """
    gate = _gate if env is None else NoticeGate(lambda: env.get("SLURMPRE_NOTICE_FILE", ""))
    dist = _distributed()
    if not gate.listening_said and (dist is None or dist.get_rank() == 0):
        _say_listening(_env(env))
        gate.listening_said = True
    return gate(None if dist is None else _torch_agree(dist))


def _say_listening(env: Mapping[str, str]) -> None:
    """Tell the watcher this script checkpoints on a notice, so it waits for that checkpoint
    (and does not requeue on a periodic one that happens to land first)."""
    path = env.get("SLURMPRE_LISTENING_FILE", "")
    if path:
        with contextlib.suppress(OSError):
            Path(path).touch()
