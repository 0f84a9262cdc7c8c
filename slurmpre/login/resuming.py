"""What a submission resumes from, and resuming only on purpose (docs/spec.md, "Resuming
on purpose"): a reused name would quietly resume the last experiment's checkpoint, so a
folder whose last run finished its training is refused unless ``--resume``, and
``--fresh`` moves it aside under a dated name (never deleting it).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from slurmpre.errors import SlurmpreError, UsageError
from slurmpre.folder.checkpoints.resolve import latest
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import (
    AttemptRecord,
    Checkpoint,
    Committed,
    End,
    GaveUp,
    InPlace,
    InPlaceRequested,
    Record,
    Requeued,
    RequeueSkipped,
    Start,
    Successor,
)
from slurmpre.keys import as_written

TASK_PREFIX = "task-"


@dataclass(frozen=True)
class Earlier:
    """The newest complete checkpoint of a folder, and what the ledger says of it."""

    folder: Path
    path: str
    step: int | None
    job: str | None  # the job whose ledger record names it (None: not written by slurmpre)
    at: float  # when it was committed (the ledger's time, else the file's)
    finished_by: str | None  # the job whose training finished in this folder, if any

    def describe(self) -> str:
        step = "a checkpoint without a step" if self.step is None else f"step {self.step}"
        who = f"job {self.job}" if self.job else "a job slurmpre did not record"
        return f"{step} ({Path(self.path).name}, written by {who}, {_when(self.at)})"


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t))


def finished_by(records: Iterable[Record]) -> str | None:
    """The job whose newest attempt in the folder finished its training, or None."""
    mine = [r for r in records if isinstance(r, AttemptRecord)]
    starts = [r for r in mine if isinstance(r, Start)]
    if not starts:
        return None
    last = starts[-1]  # the ledger appends in order
    recs = [r for r in mine if r.job == last.job and r.attempt_id == last.attempt_id]
    ends = [r for r in recs if isinstance(r, End)]
    if not ends or ends[-1].exit_code != 0:
        return None
    if any(isinstance(r, Requeued | InPlace | InPlaceRequested | GaveUp) for r in recs):
        return None
    # A successor submitted at a notice, called off because the training finished its
    # work after all, leaves a skipped requeue behind: finished. Otherwise it took over.
    if any(isinstance(r, Successor) for r in recs) and not any(
        isinstance(r, RequeueSkipped) for r in recs
    ):
        return None
    return last.job


def earlier(folder: Path) -> Earlier | None:
    """The newest complete checkpoint in ``folder`` (None if it has none)."""
    if not folder.is_dir():
        return None
    try:
        found = latest(folder).checkpoint
        records = [] if found is None else Ledger(folder).records()
    except SlurmpreError as exc:
        raise UsageError(
            f"checkpoint_dir = {as_written(str(folder))}: cannot read it ({exc})"
        ) from None
    if found is None:
        return None
    writer: Checkpoint | Committed | None = None
    for r in records:
        if isinstance(r, Checkpoint | Committed) and _same(r.path, found.where, folder):
            writer = r
    if writer is not None and writer.time is not None:
        at = writer.time
    else:
        try:
            at = found.path.stat().st_mtime
        except OSError:
            at = time.time()
    return Earlier(
        folder,
        found.where,
        found.step,
        writer.job if writer is not None else None,
        at,
        finished_by(records),
    )


def _same(recorded: str, found: str, folder: Path) -> bool:
    p = Path(recorded)
    if not p.is_absolute():
        p = folder / p
    return os.path.normpath(p) == os.path.normpath(found)


def folders(checkpoint_dir: Path, is_array: bool) -> list[Path]:
    """The folders a submission resumes from: the checkpoint folder, or an array's tasks'."""
    if not is_array:
        return [checkpoint_dir]
    try:
        names = sorted(
            e.name
            for e in os.scandir(checkpoint_dir)
            if e.name.startswith(TASK_PREFIX) and e.is_dir(follow_symlinks=False)
        )
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise UsageError(
            f"checkpoint_dir = {as_written(str(checkpoint_dir))}: cannot list it ({exc.strerror})"
        ) from None
    return [checkpoint_dir / n for n in names]


@dataclass(frozen=True)
class Plan:
    """What the submission will do with the folder's earlier work, in lines to show."""

    lines: tuple[str, ...]
    move_aside: bool


def check(
    checkpoint_dir: Path, *, is_array: bool = False, resume: bool = False, fresh: bool = False
) -> Plan:
    """Say what a submission into ``checkpoint_dir`` resumes from; refuse (UsageError,
    exit 2) a folder whose last run finished its training, unless ``resume``."""
    if resume and fresh:
        raise UsageError("--resume and --fresh: give one of them, not both")
    found = [e for e in (earlier(f) for f in folders(checkpoint_dir, is_array)) if e is not None]
    if fresh:
        if not checkpoint_dir.exists():
            return Plan(("--fresh: the folder does not exist yet; starts at step 0",), False)
        real = checkpoint_dir.is_dir() and not checkpoint_dir.is_symlink()
        if real and not any(checkpoint_dir.iterdir()):
            return Plan(("--fresh: the folder is empty; starts at step 0",), False)
        return Plan((), True)
    if not found:
        return Plan(("starts at step 0: no complete checkpoint in the folder",), False)
    finished = [e for e in found if e.finished_by is not None]
    if finished and not resume:
        e = finished[0]
        where = "" if not is_array else f" (in {e.folder.name})"
        raise UsageError(
            f"checkpoint_dir = {as_written(str(checkpoint_dir))}: job {e.finished_by} finished its "
            f"training there{where}; its last checkpoint is {e.describe()}. Pass --resume "
            "to go on from it, --fresh to move the folder aside and start at step 0, or "
            "set another checkpoint_dir"
        )
    lines = []
    for e in found:
        where = f"{e.folder.name}: " if is_array else ""
        lines.append(f"{where}resumes from {e.describe()}")
    return Plan(tuple(lines), False)


def aside_name(folder: Path, now: float) -> Path:
    """``<folder>.<UTC stamp>``, a name that is not taken (``-1``, ``-2``... if it is)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    candidate = folder.with_name(f"{folder.name}.{stamp}")
    n = 0
    while os.path.lexists(candidate):
        n += 1
        candidate = folder.with_name(f"{folder.name}.{stamp}-{n}")
    return candidate


def move_aside(folder: Path, *, now: float | None = None) -> Path:
    """Rename ``folder`` to a dated name beside it, once it is provably the job's own
    (`job_own`); refuse a link (it leads elsewhere: renaming it would not move the work
    it points at, and nothing there is touched)."""
    if folder.is_symlink():
        raise UsageError(
            f"--fresh: checkpoint_dir = {as_written(str(folder))} is a link to "
            f"{str(folder.readlink())!r}: move that folder aside yourself, or set another "
            "checkpoint_dir"
        )
    if not folder.is_dir():
        raise UsageError(f"--fresh: checkpoint_dir = {as_written(str(folder))} is not a folder")
    job_own(folder)
    target = aside_name(folder, time.time() if now is None else now)
    try:
        folder.rename(target)
    except OSError as exc:
        raise UsageError(
            f"--fresh: cannot move {str(folder)!r} aside to {str(target)!r} ({exc.strerror})"
        ) from None
    return target


def job_own(folder: Path) -> None:
    """Refuse (UsageError) to move a folder that is not one job's own checkpoint folder:
    ``$HOME``, ``/`` or a folder above ``$HOME``; a folder without a ledger of the user's;
    a folder that holds another job's folder (a ledger below it, other than its array
    tasks'). The jobs its ledger names may have had another name: starting over in a
    folder under a renamed spec is what ``--fresh`` is for."""
    real = os.path.realpath(folder)
    home = os.path.realpath(Path.home())
    where = f"--fresh: checkpoint_dir = {as_written(str(folder))}"
    if real == os.sep or real == home or home.startswith(real.rstrip(os.sep) + os.sep):
        raise UsageError(f"{where} is {real}: never moved (it is not one job's folder)")
    try:
        records = Ledger(folder).records()
    except SlurmpreError as exc:
        raise UsageError(f"{where}: not this job's own folder ({exc})") from None
    if not Ledger(folder).path.is_file():
        raise UsageError(
            f"{where} holds no ledger of slurmpre's (.slurmpre/attempts.jsonl): it is not a "
            "job's checkpoint folder; move it yourself, or set another checkpoint_dir"
        )
    if not records:
        raise UsageError(f"{where}: its ledger is empty; not moved (move it yourself)")
    for sub, dirs, _ in os.walk(folder):
        here = Path(sub)
        if here != folder and (here / ".slurmpre").is_dir() and not _task_of(here, folder):
            raise UsageError(f"{where} holds another job's checkpoint folder ({here}): not moved")
        dirs[:] = [d for d in dirs if d != ".slurmpre" and not (here / d).is_symlink()]


def _task_of(here: Path, folder: Path) -> bool:
    """An array task's own folder: ``<folder>/task-<id>``."""
    return here.parent == folder and here.name.startswith(TASK_PREFIX)
