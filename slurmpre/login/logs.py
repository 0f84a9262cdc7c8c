"""A job's logs: which file, and printing it, once or following the job across restarts."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slurmpre.errors import CommandError, SlurmpreError, UsageError
from slurmpre.job.layout import LogLayout
from slurmpre.login.jobs import Submitted, slurm_job
from slurmpre.reading import open_regular
from slurmpre.slurm.parse import JobInfo

CHUNK = 1 << 20  # a MiB at a time: a log of any size streams, never loads whole
POLL = 1.0  # seconds between looks at a followed log and its job


def log_path(entry: Submitted, attempt: int | None, info: JobInfo | None) -> Path:
    """The job's log (Slurm's own record of it wins: a template may name it otherwise), or
    one attempt's own log."""
    logs = LogLayout(Path(entry.log_dir), entry.name)
    if attempt is not None:
        if attempt < 0:
            raise UsageError(f"--attempt {attempt}: attempts count from 0")
        return logs.attempt_log(entry.job, attempt)
    if info is not None and info.stdout:
        return Path(info.stdout)
    return logs.job_log(entry.job)


def print_from(path: Path, offset: int, write: Callable[[str], None]) -> int:
    """Write the log from ``offset`` to its current end; the new offset. Only a regular
    file is read (a FIFO or a device by the log's name is refused)."""
    with open_regular(path) as fh:
        end = os.fstat(fh.fileno()).st_size
        fh.seek(offset)
        while offset < end:
            chunk = fh.read(min(CHUNK, end - offset))
            if not chunk:
                break
            write(chunk.decode(errors="replace"))
            offset += len(chunk)
    return offset


def show(
    path: Path,
    write: Callable[[str], None],
    *,
    follow: bool = False,
    client: Any = None,
    job: str = "",
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Write the log; with ``follow``, keep writing what is appended until Slurm says the
    job has ended (or forgets it), then what its last attempt wrote as it ended."""
    offset = 0
    while True:
        try:
            offset = print_from(path, offset, write)
        except FileNotFoundError:
            if not follow:
                raise SlurmpreError(f"no log at {path} (has the job started?)") from None
        except OSError as exc:
            raise SlurmpreError(f"cannot read the log {path}: {exc.strerror or exc}") from None
        if not follow:
            return
        try:
            info = slurm_job(client, job)
        except CommandError:
            sleep(POLL)  # Slurm does not answer now: the job may still run
            continue
        if info is None or info.finished:
            sleep(POLL)  # what the last attempt wrote as it ended
            with contextlib.suppress(FileNotFoundError):
                print_from(path, offset, write)
            return
        sleep(POLL)
