"""A job's logs: which file, and printing it, once or following the job across restarts."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path

from slurmpre import arguments
from slurmpre.errors import CommandError, SlurmpreError, UsageError
from slurmpre.folder.layout import LogLayout
from slurmpre.folder.ledger import Ledger
from slurmpre.login.jobs import Submitted, slurm_job
from slurmpre.login.status import chain
from slurmpre.reading import open_regular
from slurmpre.slurm.client import SlurmClient
from slurmpre.slurm.parse import JobInfo

CHUNK = 1 << 20  # a MiB at a time: a log of any size streams, never loads whole
POLL = 1.0  # seconds between looks at a followed log and its job


def check_options(
    attempt: int | None = None, tail: int | None = None, node: int | None = None
) -> None:
    """A UsageError naming the first of ``--attempt``, ``--tail``, ``--node`` that is not
    a whole number or is negative: asked before any log (or job) is looked up."""
    for name, value in (("attempt", attempt), ("tail", tail), ("node", node)):
        arguments.count(name, value, optional=True)
    if attempt is not None and attempt < 0:
        raise UsageError(f"--attempt {attempt}: attempts count from 0")
    if tail is not None and tail < 0:
        raise UsageError(f"--tail {tail}: give 0 lines or more")
    if node is not None and node < 0:
        raise UsageError(f"--node {node}: nodes count from 0")


def log_path(entry: Submitted, attempt: int | None, info: JobInfo | None) -> Path:
    """The job's log (Slurm's own record of it wins: a template may name it otherwise), or
    one attempt's own log."""
    logs = LogLayout(Path(entry.log_dir), entry.name)
    if attempt is not None:
        check_options(attempt=attempt)
        return logs.attempt_log(entry.job, attempt)
    if info is not None and info.stdout:
        return Path(info.stdout)
    return logs.job_log(entry.job)


def follow_successors(
    entry: Submitted, client: SlurmClient, write: Callable[[str], None], *, limit: int = 1000
) -> None:
    """After a followed job ends: if it handed over to a successor (restart = "successor"),
    follow that job's log too, and so on to the end of the run."""
    current = entry.job
    for _ in range(limit):
        jobs = chain(Ledger(Path(entry.checkpoint_dir), view=True).records(), current)
        if len(jobs) < 2:
            return
        successor = jobs[1]
        write(f"slurmpre: job {successor} takes over from job {current}\n")
        info = slurm_job(client, successor)
        nxt = Submitted(
            successor, entry.name, entry.checkpoint_dir, entry.log_dir, entry.submitted_at
        )
        show(log_path(nxt, None, info), write, follow=True, client=client, job=successor)
        current = successor


def tail_offset(path: Path, lines: int) -> int:
    """Where the last ``lines`` lines of the log begin (0: it has no more than that).
    Read backwards a chunk at a time: a log of any size costs what its tail does."""
    check_options(tail=lines)
    with open_regular(path) as fh:
        end = os.fstat(fh.fileno()).st_size
        if lines == 0:
            return end
        pos, seen = end, 0
        # A last line without its newline is a line too; the newline ending the log is not.
        fh.seek(max(end - 1, 0))
        if end and fh.read(1) == b"\n":
            seen = -1
        while pos > 0:
            size = min(CHUNK, pos)
            pos -= size
            fh.seek(pos)
            chunk = fh.read(size)
            for i in range(len(chunk) - 1, -1, -1):
                if chunk[i] == 0x0A:
                    seen += 1
                    if seen == lines:
                        return pos + i + 1
        return 0


def _start(path: Path, tail: int | None) -> int:
    """Where to begin: at the last ``tail`` lines, else (or with no log there yet) the top."""
    try:
        return 0 if tail is None else tail_offset(path, tail)
    except FileNotFoundError:
        return 0


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
    client: SlurmClient | None = None,
    job: str = "",
    sleep: Callable[[float], None] = time.sleep,
    tail: int | None = None,
) -> None:
    """Write the log (its last ``tail`` lines only, when given); with ``follow``, keep
    writing what is appended until Slurm says the job has ended (or forgets it), then
    what its last attempt wrote as it ended."""
    offset = _start(path, tail)
    while True:
        try:
            offset = print_from(path, offset, write)
        except FileNotFoundError:
            if not follow:
                raise SlurmpreError(f"no log at {path} (has the job started?)") from None
        except OSError as exc:
            raise SlurmpreError(f"cannot read the log {path}: {exc.strerror or exc}") from None
        if not follow or client is None:
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


class NodeLines:
    """A writer that passes on only the lines of one node of a multi-node job: srun's
    ``--label`` starts each line the wrapper on the job's node N wrote with ``N: ``
    (N counts the attempt's nodes from 0, as its ``slurmpre: job ... on`` line lists
    them); lines slurmpre's batch script wrote itself go through too. Partial lines wait
    for their end."""

    def __init__(self, node: int, write: Callable[[str], None]) -> None:
        check_options(node=node)
        self.prefix = f"{node}: "
        self.write = write
        self.partial = ""

    def __call__(self, text: str) -> None:
        lines = (self.partial + text).split("\n")
        self.partial = lines.pop()
        for line in lines:
            if self._keep(line):
                self.write(line + "\n")

    def _keep(self, line: str) -> bool:
        head, colon, _ = line.partition(": ")
        return line.startswith(self.prefix) or not (colon and head.isdigit())

    def flush(self) -> None:
        if self.partial and self._keep(self.partial):
            self.write(self.partial)
        self.partial = ""


def follow_tasks(
    tasks: list[tuple[str, Path]],
    client: SlurmClient,
    write: Callable[[str], None],
    *,
    tail: int | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """An array's tasks' logs at once, as ``tail -f`` shows several files: what each
    appends, under a ``==> TASK <==`` line whenever the writer changes; until Slurm says
    every task has ended (or forgot it). ``tasks``: (the task's job, its log)."""
    offsets = {job: _start(path, tail) for job, path in tasks}
    last: str | None = None
    running = {job for job, _ in tasks}
    while True:
        for job, path in tasks:
            chunks: list[str] = []
            try:
                offsets[job] = print_from(path, offsets[job], chunks.append)
            except FileNotFoundError:
                continue  # not started yet
            except OSError as exc:
                raise SlurmpreError(f"cannot read the log {path}: {exc.strerror or exc}") from None
            if chunks:
                if last != job:
                    write(f"\n==> {job} <==\n" if last is not None else f"==> {job} <==\n")
                    last = job
                for chunk in chunks:
                    write(chunk)
        if not running:
            return
        for job in sorted(running):
            try:
                info = slurm_job(client, job)
            except CommandError:
                continue
            if info is None or info.finished:
                running.discard(job)
        # One more pass once all have ended: what each last attempt wrote as it ended.
        sleep(POLL)
