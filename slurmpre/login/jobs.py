"""The user's own list of the jobs `slurmpre submit` queued, so the login-node commands
find a job's checkpoint folder and logs by its id or its name, long after Slurm
has forgotten it.

One JSON line per submission in ``$XDG_STATE_HOME/slurmpre/jobs.jsonl``
(``~/.local/state/slurmpre/jobs.jsonl``), appended under a lock, owner-only.
"""

from __future__ import annotations

import getpass
import json
import math
import os
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from slurmpre.errors import CommandError, JobNotFound, SlurmpreError, UsageError
from slurmpre.folder import trust
from slurmpre.folder.access import OWNER, make_dirs, set_mode
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.locks import FolderLock, LockTimeout
from slurmpre.folder.records import Start
from slurmpre.login import arrays
from slurmpre.login.status import chain
from slurmpre.reading import LARGE, read_regular, skip_line
from slurmpre.slurm.client import SlurmClient
from slurmpre.slurm.parse import JobInfo
from slurmpre.slurm.states import UNKNOWN_TO_SLURM


@dataclass(frozen=True)
class Submitted:
    job: str
    name: str
    checkpoint_dir: str
    log_dir: str
    submitted_at: float
    array: str | None = None  # an array job's range ("0-2"): the job stands for its tasks

    def task(self, task: str) -> Submitted:
        """One task of this array job: ``123_5``, in ``<checkpoint_dir>/task-5``."""
        return Submitted(
            f"{self.job}_{task}",
            self.name,
            arrays.task_folder(self.checkpoint_dir, task),
            self.log_dir,
            self.submitted_at,
        )

    def tasks(self) -> list[Submitted]:
        """Its tasks, for an array job; else itself."""
        if self.array is None:
            return [self]
        return [self.task(t) for t in arrays.task_ids(self.array)]

    def to_json(self) -> dict[str, object]:
        out = asdict(self)
        if self.array is None:
            del out["array"]  # read as ever by a slurmpre that predates arrays here
        return out


def index_path(env: dict[str, str] | None = None) -> Path:
    env = dict(os.environ) if env is None else env
    base = env.get("XDG_STATE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".local/state")
    return Path(base) / "slurmpre" / "jobs.jsonl"


def remember(entry: Submitted, path: Path | None = None) -> None:
    """Add a submission. A SlurmpreError if it cannot: the caller says so (the job is
    queued all the same; only the lookup by name is lost)."""
    path = path or index_path()
    try:
        make_dirs(path.parent, OWNER)
        with FolderLock(path.with_name(path.name + ".lock"), timeout=10):
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = trust.open_own(path, OWNER.file_mode, flags=flags)
            set_mode(fd, OWNER.file_mode)
            with os.fdopen(fd, "a") as fh:
                fh.write(json.dumps(entry.to_json(), sort_keys=True) + "\n")
    except (OSError, LockTimeout, SlurmpreError) as exc:
        raise SlurmpreError(f"could not record the job in {path}: {exc}") from None


def known(path: Path | None = None) -> list[Submitted]:
    """Every recorded submission, oldest first; a line that is not one (torn by a kill,
    or of the wrong shape) is skipped, with one warning on stderr."""
    path = path or index_path()
    try:
        data = read_regular(path, LARGE)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise SlurmpreError(f"cannot read {path}: {exc.strerror or exc}") from None
    out = []
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        entry = _entry(line)
        if isinstance(entry, Submitted):
            out.append(entry)
        else:
            skip_line(path, number, line, entry, lambda text: print(text, file=sys.stderr))
    return out


_FIELDS = {f.name: f.type for f in fields(Submitted)}
_OPTIONAL = {"array"}


def _entry(line: bytes) -> Submitted | str:
    """The submission on ``line``, or why it is none."""
    try:
        data = json.loads(line.decode())
    except (UnicodeDecodeError, ValueError):
        return "not JSON"
    if not isinstance(data, dict) or not set(_FIELDS) - _OPTIONAL <= set(data) <= set(_FIELDS):
        return f"not a submission (it must hold exactly {', '.join(sorted(_FIELDS))})"
    for key, value in data.items():
        if key == "array":
            ok = value is None or (isinstance(value, str) and _is_range(value))
        elif key == "submitted_at":
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            ok = ok and math.isfinite(value)
        else:
            ok = isinstance(value, str) and bool(value)
        if not ok:
            return f"{key} = {json.dumps(value)[:40]} has the wrong type"
    return Submitted(**data)


def _is_range(text: str) -> bool:
    from slurmpre.login.values import array

    try:
        return array("array", text) is not None
    except SlurmpreError:
        return False


def find(which: str, path: Path | None = None) -> Submitted | None:
    """By job id, else the newest job of that name."""
    entries = known(path)
    for e in reversed(entries):
        if e.job == which:
            return e
    for e in reversed(entries):
        if e.name == which:
            return e
    return None


def locate(which: str, checkpoint_dir: str | None = None, path: Path | None = None) -> Submitted:
    """A job by id or name: from the user's list, else from a checkpoint folder's ledger.
    ``123_5`` is task 5 of array job 123; ``123`` an array job stands for all its tasks."""
    which = which.strip()
    if not which:
        raise UsageError("JOB is empty: give a job id or a job name")
    base, task = arrays.split(which)
    if task is not None:
        try:
            parent = locate(base, checkpoint_dir, path)
        except UsageError:
            parent = None
        # Submitted by a slurmpre that did not record the range: its tasks' folders say.
        if (
            parent is not None
            and parent.array is None
            and Path(arrays.task_folder(parent.checkpoint_dir, task)).is_dir()
        ):
            return parent.task(task)
        if parent is not None and parent.array is not None:
            if task not in arrays.task_ids(parent.array):
                raise UsageError(
                    f"job {which!r}: array job {base} has no task {task} "
                    f"(its tasks: {parent.array})"
                )
            return parent.task(task)
        if parent is not None and checkpoint_dir is None:
            raise UsageError(f"job {which!r}: job {base} is not an array job")
    if checkpoint_dir is None:
        found = find(which, path)
        if found is not None:
            return found
        raise UsageError(
            f"job {which!r} is not among the jobs you submitted with slurmpre "
            f"({path or index_path()}): give its --checkpoint-dir"
        )
    return _in_ledger(which, Path(checkpoint_dir))


def _in_ledger(which: str, folder: Path) -> Submitted:
    """The job ``which`` as a checkpoint folder's ledger records it (an array task's own
    folder, ``task-N``, named by its array's ledger one folder up)."""
    from slurmpre.folder import records

    ledger = Ledger(folder, view=True)
    if not ledger.path.is_file():
        raise UsageError(f"--checkpoint-dir {str(folder)!r} has no ledger ({ledger.path})")
    named = [r for r in ledger.records() if isinstance(r, records.Submitted | records.Start)]
    for r in reversed(named):
        if r.job == which or (isinstance(r, records.Submitted) and r.name == which):
            submitted = [x for x in named if isinstance(x, records.Submitted)]
            mine = next((x for x in submitted if x.job == r.job), None)
            if mine is None and folder.name.startswith("task-"):
                parent = Ledger(folder.parent, view=True)
                if parent.path.is_file():
                    base = arrays.split(r.job)[0]
                    mine = next(
                        (x for x in parent.records()
                         if isinstance(x, records.Submitted) and x.job == base),
                        None,
                    )  # fmt: skip
            name = mine.name if mine is not None else folder.name
            array = mine.array if mine is not None and mine.job == r.job else None
            above = mine is not None and mine.job != r.job  # a task's, from its array's ledger
            logs = (folder.parent if above else folder) / "logs"
            return Submitted(r.job, name, str(folder), str(logs), r.time or 0.0, array=array)
    raise UsageError(f"no job {which!r} in the ledger of {str(folder)!r}")


# -- what Slurm says of a job -------------------------------------------------------
def slurm_job(client: SlurmClient, job: str) -> JobInfo | None:
    """Slurm's view of ``job``, or None when Slurm has forgotten it."""
    try:
        return client.job(job)
    except JobNotFound:
        return None


def slurm_view(client: SlurmClient, job: str, warn: Callable[[str], None]) -> JobInfo | None:
    """Slurm's view of ``job`` for a command that only shows it: None when Slurm has
    forgotten it, or does not answer (said in one line: the ledger is shown instead)."""
    try:
        return slurm_job(client, job)
    except CommandError as exc:
        first = str(exc).splitlines()[0]
        warn(
            f"slurmpre: Slurm did not answer about job {job} ({first}): showing what its "
            "checkpoint folder records"
        )
        return None


def check_mine(info: JobInfo | None, job: str) -> None:
    """A UsageError when Slurm says ``job`` belongs to another user."""
    me = getpass.getuser()
    if info is not None and info.user and info.user != me:
        raise UsageError(f"job {job} belongs to {info.user}, not to you ({me}): refused")


def by_tag(infos: list[JobInfo]) -> dict[str, JobInfo]:
    """Jobs by the name a person gives them (`JobInfo.tag`): an array's tasks still
    pending in its one record (``ArrayTaskId=2-5%2``) each under their own."""
    out: dict[str, JobInfo] = {}
    for info in infos:
        out[info.tag] = info
        array, pending = info.raw.get("ArrayJobId"), info.raw.get("ArrayTaskId", "")
        if array and pending and not pending.isdigit() and _is_range(pending):
            for task in arrays.task_ids(pending):
                out.setdefault(f"{array}_{task}", info)
    return out


def rows(
    client: SlurmClient, last: int = 50, warn: Callable[[str], None] = lambda _: None
) -> list[dict[str, object]]:
    """One row per job you submitted (the last ``last`` submissions; an array's tasks one
    by one), with Slurm's state where it still knows the job, else what its ledger
    records. Slurm is asked for your jobs only; when it does not answer, ``warn`` hears
    it once and every row comes from its ledger."""
    me = getpass.getuser()
    try:
        live = by_tag(client.jobs(user=me))
    except CommandError as exc:
        first = str(exc).splitlines()[0]
        warn(f"slurmpre: Slurm did not answer ({first}): showing what the ledgers record")
        live = {}
    out: list[dict[str, object]] = []
    for e in (task for entry in known()[-last:] for task in entry.tasks()):
        try:
            records = Ledger(Path(e.checkpoint_dir), view=True).records()
        except SlurmpreError:
            records = []
        run = chain(records, e.job)  # the job, and the successors that took over from it
        info = live.get(run[-1])
        starts = [r for r in records if isinstance(r, Start) and r.job in run]
        attempts = len({(r.job, r.attempt) for r in starts})
        out.append(
            {
                "job": e.job,
                "name": e.name,
                "state": info.state if info else UNKNOWN_TO_SLURM,
                "restarts": info.restarts if info else max(attempts - 1, 0),
                "attempts": attempts,
                "jobs": run,
                "in_place": sum(1 for r in starts if r.in_place),
                "checkpoint_dir": e.checkpoint_dir,
            }
        )
    return out
