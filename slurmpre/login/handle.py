"""A submitted job from Python (docs/login.md, "From Python"): find again, status, wait,
cancel, logs. A `Job` stands for the *run* its job began: after a hand-over, `status`,
`wait`, `cancel` and `logs` follow its successor. The command line is a layer over this.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from slurmpre import arguments
from slurmpre.errors import JobFailed, SlurmpreError, UsageError
from slurmpre.folder.ledger import Ledger
from slurmpre.login import jobs
from slurmpre.login.logs import (
    NodeLines,
    check_options,
    follow_successors,
    follow_tasks,
    log_path,
    show,
)
from slurmpre.login.status import JobStatus, Prices, chain, gpus_of, job_status
from slurmpre.slurm import states
from slurmpre.slurm.client import SlurmClient, default_client
from slurmpre.slurm.parse import JobInfo
from slurmpre.slurm.states import FINISHED, UNKNOWN_TO_SLURM

WAIT_POLL = 5.0  # seconds between looks at a job being waited for


@dataclass
class Job:
    id: str
    name: str
    checkpoint_dir: Path
    log_dir: Path
    client: SlurmClient = field(default_factory=default_client, repr=False, compare=False)
    array: str | None = None  # an array job's range: the job stands for its tasks
    # Where "Slurm did not answer" goes when only showing the job (status, logs): with
    # it, the ledger is shown instead; without it (the default), the error is raised.
    warn: Callable[[str], None] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def find(
        cls,
        which: str,
        checkpoint_dir: str | Path | None = None,
        client: SlurmClient | None = None,
        *,
        warn: Callable[[str], None] | None = None,
    ) -> Job:
        """A job by its id or its name (the newest of that name); ``123_5`` one task of
        array job 123, ``123`` all of them."""
        arguments.expect("which", which, (str, int), "a job id or a job's name")
        arguments.expect("checkpoint_dir", checkpoint_dir, arguments.PATH, "a folder's path",
                         optional=True)  # fmt: skip
        entry = jobs.locate(str(which), None if checkpoint_dir is None else str(checkpoint_dir))
        return cls.from_entry(entry, client, warn=warn)

    @classmethod
    def from_entry(
        cls,
        entry: jobs.Submitted,
        client: SlurmClient | None = None,
        *,
        warn: Callable[[str], None] | None = None,
    ) -> Job:
        """The job the user's list (or a ledger) records as ``entry``."""
        return cls(
            entry.job,
            entry.name,
            Path(entry.checkpoint_dir),
            Path(entry.log_dir),
            client or default_client(),
            entry.array,
            warn,
        )

    @property
    def entry(self) -> jobs.Submitted:
        return jobs.Submitted(
            self.id, self.name, str(self.checkpoint_dir), str(self.log_dir), 0.0, self.array
        )

    def tasks(self) -> list[Job]:
        """An array job's tasks (``123_0``, ``123_1``, ...), each a Job; else [itself]."""
        if self.array is None:
            return [self]
        return [Job.from_entry(t, self.client, warn=self.warn) for t in self.entry.tasks()]

    def labels(self) -> dict[str, str]:
        """A sweep's tasks as its submit named them (``123_0`` -> ``env.LR=0.1``); {} for
        a job that is not an array, or whose ledger does not say."""
        from slurmpre.folder import records

        if self.array is None:
            return {}
        try:
            found = Ledger(self.checkpoint_dir, view=True).records()
        except SlurmpreError:
            return {}
        mine = next(
            (r for r in found if isinstance(r, records.Submitted) and r.job == self.id), None
        )
        if mine is None or not mine.tasks:
            return {}
        return {t.id: label for t, label in zip(self.tasks(), mine.tasks, strict=False)}

    def _one(self, what: str) -> None:
        if self.array is not None:
            raise UsageError(
                f"job {self.id} is an array of tasks {self.array}: ask each of "
                f"Job.tasks() for its {what} (or Job.find('{self.id}_0'))"
            )

    def run(self) -> list[str]:
        """This job and the successors that took over from it, in order."""
        return chain(Ledger(self.checkpoint_dir, view=True).records(), self.id)

    def _slurm(self, job: str, *, showing: bool = False) -> JobInfo | None:
        """Slurm's view of ``job`` (None once it forgot it). ``showing``: only to show it
        (a teammate's job too, as Slurm's own squeue shows it), so with `warn` a Slurm that
        does not answer is said there and the ledger alone is shown; otherwise another
        user's job is refused."""
        if showing and self.warn is not None:
            info = jobs.slurm_view(self.client, job, self.warn)
        else:
            info = jobs.slurm_job(self.client, job)
        if not showing:
            jobs.check_mine(info, job)
        return info

    def status(self, prices: Prices | None = None) -> JobStatus:
        """Its attempts, how each ended, steps lost and cost (`slurmpre status`)."""
        arguments.expect("prices", prices, Prices, "a slurmpre Prices", optional=True)
        self._one("status")
        records = Ledger(self.checkpoint_dir, view=True).records()
        last = chain(records, self.id)[-1]  # after hand-overs, the successor Slurm runs
        info = self._slurm(last, showing=True)
        return job_status(
            self.id, self.name, str(self.checkpoint_dir), records, info,
            gpus_per_node=gpus_of(info), prices=prices or Prices(), now=time.time(),
        )  # fmt: skip

    def state(self) -> str:
        """Slurm's state of the run's last job, or UNKNOWN TO SLURM once it forgot it."""
        self._one("state")
        info = self._slurm(self.run()[-1])
        return UNKNOWN_TO_SLURM if info is None else info.state

    def wait(
        self,
        timeout: float | None = None,
        *,
        poll: float = WAIT_POLL,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> str:
        """Until the run ends, across requeues and hand-overs: "COMPLETED", or JobFailed
        naming the state and why (the last attempt's end, as `status` says it). A
        SlurmpreError after ``timeout`` seconds, naming the state then."""
        arguments.seconds("timeout", timeout, optional=True)
        arguments.seconds("poll", poll)
        if timeout is not None and not timeout >= 0:
            raise UsageError(f"--timeout {timeout:g}: give 0 seconds or more")
        deadline = None if timeout is None else clock() + timeout
        if self.array is not None:
            return self._wait_tasks(deadline, poll=poll, sleep=sleep, clock=clock)
        while True:
            run = self.run()
            info = self._slurm(run[-1])
            # A job handed over ends (COMPLETED) once its successor is recorded: the
            # run goes on in that one, so only the last job of the chain counts.
            if info is None or info.state in FINISHED:
                if self.run() == run:
                    return self._outcome(run[-1], info)
                continue
            if deadline is not None and clock() >= deadline:
                raise SlurmpreError(
                    f"job {run[-1]} is still {info.state} after {timeout:g} s of waiting"
                )
            sleep(poll if deadline is None else max(min(poll, deadline - clock()), 0))

    def _wait_tasks(
        self,
        deadline: float | None,
        *,
        poll: float,
        sleep: Callable[[float], None],
        clock: Callable[[], float],
    ) -> str:
        """Every task to its end: "COMPLETED" when all completed, else one JobFailed
        naming each task that did not (its ``state``: the first such task's)."""
        failed: list[JobFailed] = []
        for task in self.tasks():
            left = None if deadline is None else max(deadline - clock(), 0.0)
            try:
                task.wait(left, poll=poll, sleep=sleep, clock=clock)
            except JobFailed as exc:
                failed.append(exc)
        if not failed:
            return states.COMPLETED
        n = len(self.tasks())
        raise JobFailed(
            f"{len(failed)} of {n} tasks of array job {self.id} did not complete: "
            + "; ".join(str(f) for f in failed),
            failed[0].state,
        )

    def _outcome(self, last: str, info: JobInfo | None) -> str:
        st = self.status()
        rows = st.attempts
        ended = rows[-1].ended if rows else "never started"
        if info is None:
            if ended == "completed":
                return states.COMPLETED
            raise JobFailed(
                f"job {last} ended ({ended}); Slurm no longer knows its final state",
                UNKNOWN_TO_SLURM,
            )
        if info.state == states.COMPLETED and ended in ("completed", "never started"):
            return states.COMPLETED
        why = f": {rows[-1].gave_up}" if rows and rows[-1].gave_up else f" ({ended})"
        if info.state == states.COMPLETED:
            raise JobFailed(
                f"job {last} ended COMPLETED but its training {ended}", states.COMPLETED
            )
        raise JobFailed(f"job {last} ended {info.state}{why}", info.state)

    def cancel(self, after_checkpoint: bool = False, wait: float = 1800.0) -> str:
        """Cancel the run (a pending successor too); what happened, in one line."""
        from slurmpre.login.cancel import cancel, cancel_tasks

        arguments.flag("after_checkpoint", after_checkpoint)
        arguments.seconds("wait", wait)
        if self.array is not None:
            return cancel_tasks(
                self.client, self.entry, after_checkpoint=after_checkpoint, wait=wait
            )
        return cancel(self.client, self.entry, after_checkpoint=after_checkpoint, wait=wait)

    def log_path(self, attempt: int | None = None) -> Path:
        """Where the job's log is (every attempt, appended), or one attempt's own."""
        arguments.count("attempt", attempt, optional=True)
        self._one("log")
        return log_path(self.entry, attempt, self._slurm(self.id, showing=True))

    def logs(
        self, attempt: int | None = None, *, tail: int | None = None, node: int | None = None
    ) -> str:
        """The job's log (every attempt, appended), or one attempt's own; only its last
        ``tail`` lines, only node ``node``'s lines (multi-node jobs: srun's ``--label``). An
        array's tasks' logs one after the other, each under a ``==> task <==`` line."""
        parts: list[str] = []
        self.stream_logs(parts.append, attempt=attempt, tail=tail, node=node)
        return "".join(parts)

    def stream_logs(
        self,
        write: Callable[[str], None],
        *,
        attempt: int | None = None,
        follow: bool = False,
        tail: int | None = None,
        node: int | None = None,
    ) -> None:
        """`logs` written as it is read; with ``follow``, on until the run ends (into a
        successor after a hand-over; an array's tasks at once, as ``tail -f`` shows them)."""
        check_options(attempt, tail, node)
        kept = NodeLines(node, write) if node is not None else None
        out = kept if kept is not None else write
        try:
            if self.array is not None:
                self._task_logs(out, attempt=attempt, follow=follow, tail=tail)
                return
            show(self.log_path(attempt), out, follow=follow, client=self.client, job=self.id,
                 tail=tail)  # fmt: skip
            if follow and attempt is None:
                follow_successors(self.entry, self.client, out)
        finally:
            if kept is not None:
                kept.flush()

    def log_texts(
        self, attempt: int | None = None, *, tail: int | None = None, node: int | None = None
    ) -> list[tuple[str, Path, str | None]]:
        """Each task's (the job's own, when not an array) log as it is now: (job, path,
        text or None when there is no log there yet)."""
        check_options(attempt, tail, node)  # before reading: a bad one is no missing log
        out: list[tuple[str, Path, str | None]] = []
        for task, path in self._log_files(attempt):
            try:
                out.append((task, path, Job._read(path, tail, node)))
            except SlurmpreError:
                out.append((task, path, None))
        return out

    @staticmethod
    def _read(path: Path, tail: int | None, node: int | None) -> str:
        parts: list[str] = []
        keep = NodeLines(node, parts.append) if node is not None else None
        show(path, keep if keep is not None else parts.append, tail=tail)
        if keep is not None:
            keep.flush()
        return "".join(parts)

    def _log_files(self, attempt: int | None) -> list[tuple[str, Path]]:
        """(job, its log) for the job, or for each task of an array (whose tasks are not
        asked of Slurm one by one: their logs are where the ledger says)."""
        if self.array is None:
            return [(self.id, self.log_path(attempt))]
        return [(t.id, log_path(t.entry, attempt, None)) for t in self.tasks()]

    def _task_logs(
        self, write: Callable[[str], None], *, attempt: int | None, follow: bool, tail: int | None
    ) -> None:
        tasks = self._log_files(attempt)
        if follow:
            follow_tasks(tasks, self.client, write, tail=tail)
            return
        for n, (job, path) in enumerate(tasks):
            write(f"{chr(10) if n else ''}==> {job} <==\n")
            if path.is_file():
                show(path, write, tail=tail)
            else:
                write(f"(no log yet at {path})\n")
