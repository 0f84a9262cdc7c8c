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
from typing import Any

from filelock import FileLock, Timeout

from slurmpre.access import OWNER, make_dirs, set_mode
from slurmpre.errors import CommandError, JobNotFound, SlurmpreError, UsageError
from slurmpre.job.ledger import Ledger
from slurmpre.job.records import Start
from slurmpre.login.status import chain
from slurmpre.reading import LARGE, read_regular, skip_line
from slurmpre.slurm.parse import UNKNOWN_TO_SLURM, JobInfo


@dataclass(frozen=True)
class Submitted:
    job: str
    name: str
    checkpoint_dir: str
    log_dir: str
    submitted_at: float


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
        with FileLock(str(path) + ".lock", timeout=10, mode=OWNER.file_mode):
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, OWNER.file_mode)
            set_mode(fd, OWNER.file_mode)
            with os.fdopen(fd, "a") as fh:
                fh.write(json.dumps(asdict(entry), sort_keys=True) + "\n")
    except (OSError, Timeout) as exc:
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


def _entry(line: bytes) -> Submitted | str:
    """The submission on ``line``, or why it is none."""
    try:
        data = json.loads(line.decode())
    except (UnicodeDecodeError, ValueError):
        return "not JSON"
    if not isinstance(data, dict) or set(data) != set(_FIELDS):
        return f"not a submission (it must hold exactly {', '.join(sorted(_FIELDS))})"
    for key, value in data.items():
        if key == "submitted_at":
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            ok = ok and math.isfinite(value)
        else:
            ok = isinstance(value, str) and bool(value)
        if not ok:
            return f"{key} = {json.dumps(value)[:40]} has the wrong type"
    return Submitted(**data)


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
    """A job by id or name: from the user's list, else from a checkpoint folder's ledger."""
    which = which.strip()
    if not which:
        raise UsageError("JOB is empty: give a job id or a job name")
    if checkpoint_dir is None:
        found = find(which, path)
        if found is not None:
            return found
        raise UsageError(
            f"job {which!r} is not among the jobs you submitted with slurmpre "
            f"({path or index_path()}): give its --checkpoint-dir"
        )
    from slurmpre.job import records
    from slurmpre.job.ledger import Ledger

    folder = Path(checkpoint_dir)
    ledger = Ledger(folder)
    if not ledger.path.is_file():
        raise UsageError(f"--checkpoint-dir {checkpoint_dir!r} has no ledger ({ledger.path})")
    named = [r for r in ledger.records() if isinstance(r, records.Submitted | records.Start)]
    for r in reversed(named):
        if r.job == which or (isinstance(r, records.Submitted) and r.name == which):
            name = next(
                (x.name for x in named if isinstance(x, records.Submitted) and x.job == r.job),
                folder.name,
            )
            return Submitted(r.job, name, str(folder), str(folder / "logs"), r.time or 0.0)
    raise UsageError(f"no job {which!r} in the ledger of {checkpoint_dir!r}")


# -- what Slurm says of a job -------------------------------------------------------
def slurm_job(client: Any, job: str) -> JobInfo | None:
    """Slurm's view of ``job``, or None when Slurm has forgotten it."""
    try:
        return client.job(job)  # type: ignore[no-any-return]
    except JobNotFound:
        return None


def slurm_view(client: Any, job: str, warn: Callable[[str], None]) -> JobInfo | None:
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


def rows(client: Any, last: int = 50) -> list[dict[str, object]]:
    """One row per job you submitted (the last ``last``), with Slurm's state where it
    still knows the job, else what its ledger records."""
    me = getpass.getuser()
    live = {j.job_id: j for j in client.jobs() if j.user == me}
    out: list[dict[str, object]] = []
    for e in known()[-last:]:
        try:
            records = Ledger(Path(e.checkpoint_dir)).records()
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
