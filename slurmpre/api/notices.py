"""The notice, as a training script asks it: `preemption_requested`, `checkpoint_requested`,
agreed by every rank on the same step (`slurmpre.job.watch.notice.NoticeGate`)."""

from __future__ import annotations

import functools
import sys
from collections.abc import Mapping
from typing import Any, Literal

from slurmpre.api.attempt import distributed, env_of, mark, own_files
from slurmpre.api.meeting import device
from slurmpre.job.watch.notice import CHECKPOINT, STOP, Agree, NoticeGate

# One gate per notice file, for the life of the process: its marks, and what the script
# has asked so far, last from one call to the next (whatever mapping ``env`` is given as).
_gates: dict[str, NoticeGate] = {}

# The marks a script leaves for the watcher, each once: `AttemptFiles`'s names for them.
Mark = Literal["listening", "taken", "goes_on"]


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


def gate_for(env: Mapping[str, str] | None) -> NoticeGate:
    """This process's gate on this attempt's notice file (none outside a slurmpre job)."""
    files = own_files(env_of(env))
    path = "" if files is None else str(files.notice)
    gate = _gates.get(path)
    return gate if gate is not None else watch_notices(path)


def watch_notices(path: str, *, check_every: float = 1.0) -> NoticeGate:
    """Start the gate on the notice file ``path`` afresh: a new attempt inside one process,
    or a test that wants every call to look at the file (``check_every=0``)."""
    gate = _gates[path] = NoticeGate(lambda: path, check_every=check_every)
    return gate


def _level(gate: NoticeGate, env: Mapping[str, str] | None, which: Mark) -> tuple[int, bool]:
    """The notice level all ranks agree on now, and whether this is the first rank
    (which leaves the script's marks); ``which`` is the mark this call leaves once."""
    dist = distributed()
    first_rank = dist is None or dist.get_rank() == 0
    if first_rank:
        # The watcher then waits for the checkpoint this script takes on the notice,
        # not for a periodic one that happens to land first.
        _leave(gate, env, which)
    return gate.agree(None if dist is None else _torch_agree(dist)), first_rank


def _leave(gate: NoticeGate, env: Mapping[str, str] | None, which: Mark) -> None:
    """Leave the mark ``which`` once in ``gate``'s life: the file `AttemptFiles` names so
    (none outside a slurmpre job)."""
    if which not in gate.marked:
        files = own_files(env_of(env))
        if files is not None:
            mark(getattr(files, which))
        gate.marked.add(which)


def preemption_requested(env: Mapping[str, str] | None = None) -> bool:
    """True once the job must checkpoint now and stop: its node is being preempted (or
    time runs out).

    Call it once per step on every rank. When torch.distributed is initialized
    all ranks agree through one small all_reduce, so they all see True at the
    same step and a collective checkpoint cannot deadlock or mix steps; the
    all_reduce runs about once a second of steps (every 0.2 s once a notice is
    known), not every step, so it costs next to nothing (see
    slurmpre.job.watch.notice.NoticeGate):

        if slurmpre.preemption_requested():
            with slurmpre.checkpoint(step) as path:
                save(path)
            break  # slurmpre restarts the job once the checkpoint has committed

    A script that also asks `checkpoint_requested()` is told to stop later: when the
    job that takes over is ready, or as the draining node's deadline nears.
    """
    gate = gate_for(env)
    level, first_rank = _level(gate, env, "listening")
    gate.stop_asked = True
    answer = level >= (STOP if gate.goes_on else CHECKPOINT)
    if answer and first_rank:
        # The script stops on this notice: its exit is not the end of its work.
        _leave(gate, env, "taken")
    return answer


def stopping(env: Mapping[str, str] | None = None) -> bool:
    """`preemption_requested()` has answered True in this process: the script stops (its
    next checkpoint is its last in this attempt). Never asks the notice file itself."""
    return "taken" in gate_for(env).marked


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
    another node (or the next step on a spare, beside this one), and
    `preemption_requested()` turns True when it is ready (it waits in `resume_path()`)
    or as the deadline nears (window, less the margin, less the measured checkpoint
    time), whichever comes first. Where none is on its way (an in-place restart
    without a spare, a requeue) both turn True at once.
    """
    gate = gate_for(env)
    gate.goes_on = True
    level, _ = _level(gate, env, "goes_on")
    if gate.checkpoint_answered or level < CHECKPOINT:
        return False
    if level >= STOP and gate.stop_asked:
        return False  # preemption_requested() answers this notice: one save, not two
    gate.checkpoint_answered = True
    return True
