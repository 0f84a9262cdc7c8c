"""``slurmpre.job steps``: the batch script's supervisor, which restarts in place.

It runs the job's srun as a step. When the step's watcher asks (`inplace.Request`), it
ends the step (SIGTERM, ``--grace`` seconds after the ask), releases the drained nodes
(a requeue if that fails) and runs the next step on the nodes kept; an early request
starts that step at once, beside this one (`overlap`). A signal to the supervisor
(Slurm's cancel, requeue or time limit) means no further step is started. With
``--spares K`` the batch host and the allocation's last nodes do not train. See
docs/how-it-works.md ("Fast restart, in place", "Hot spares").
"""

from __future__ import annotations

import contextlib
import logging
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from slurmpre import environment, lines
from slurmpre.errors import SlurmpreError, UsageError
from slurmpre.folder import records, trust
from slurmpre.folder.layout import FolderLayout, attempt_key
from slurmpre.folder.ledger import Ledger
from slurmpre.job.handover.inplace import (
    Request,
    read_request,
    read_spares,
)
from slurmpre.job.handover.steps_args import StepsOptions, parse_args
from slurmpre.job.start.env import JobEnv, read_job_env
from slurmpre.job.start.resume import task_checkpoint_dir
from slurmpre.job.start.supervise import exit_code
from slurmpre.slurm.client import CommandLineSlurm, SlurmClient
from slurmpre.slurm.hostlist import expand

LOG = logging.getLogger(__name__)

KILL_AFTER = 30.0  # after SIGTERM, seconds before srun is killed (Slurm's KillWait)
POLL = 0.1  # how often the step and the request are looked at
SPARES_POLL = 1.0  # how often the watcher's list of drained spares is read
# Signals that stop the supervisor from starting another step; passed on to srun.
_STOPPING = (signal.SIGTERM, signal.SIGHUP)


def first_spares(allocation: Sequence[str], batch_host: str, count: int) -> tuple[str, ...]:
    """The nodes held as spares at the start: the batch host, then the allocation's last
    ones; at least one node trains."""
    count = min(count, len(allocation) - 1)
    if count <= 0:
        return ()
    rest = [n for n in allocation if n != batch_host]
    host = [batch_host] if batch_host in allocation else []
    return tuple(host + rest[len(rest) - (count - len(host)) :])[:count]


def step_argv(
    srun: Sequence[str], keep: Sequence[str] | None, *, overlap: bool = False
) -> list[str]:
    """The srun command for a step; after an in-place restart, pinned to the kept nodes.
    ``overlap``: it starts beside the step still running there (`handover.overlap`)."""
    if keep is None:
        return list(srun)
    n = len(keep)
    pinned = [f"--nodes={n}", f"--ntasks={n}", f"--nodelist={','.join(keep)}"]
    return [srun[0], *pinned, *(["--overlap"] if overlap else []), *srun[1:]]


def resized_env(env: Mapping[str, str], resized: Mapping[str, str | None]) -> dict[str, str]:
    """The job's environment after a resize: Slurm's new values; a step count of the old
    allocation (SLURM_NTASKS, SLURM_NPROCS) would make srun start too many tasks."""
    out = {k: v for k, v in env.items() if k not in ("SLURM_NTASKS", "SLURM_NPROCS")}
    for key, value in resized.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


class Steps:
    def __init__(
        self,
        opts: StepsOptions,
        job: JobEnv,
        env: Mapping[str, str],
        client: SlurmClient,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.opts = opts
        self.job = job
        self.client = client
        self.clock = clock
        self.wall = wall
        self.folder = task_checkpoint_dir(opts.checkpoint_dir, job)
        self.ledger = Ledger(self.folder, access=opts.file_access)
        self.stopped: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        # Only srun can be pinned to the kept nodes: with another launcher, always requeue.
        self.can_restart = Path(opts.srun[0]).name == "srun"
        # The job's environment for the next step: Slurm's, resized after each release.
        self.step_env = dict(env)
        self.in_place = 0  # in-place restarts so far: the running step's count
        self.spares_asked: set[str] = set()  # drained spares whose release was tried once
        # The next step, started beside the running one (`overlap`), and what it was for.
        self.early: tuple[subprocess.Popen[bytes], Request] | None = None

    @property
    def allocation(self) -> tuple[str, ...]:
        """The nodes the job holds now, as its (resized) environment says."""
        nodes = self.step_env.get("SLURM_JOB_NODELIST") or self.step_env.get("SLURM_NODELIST")
        return tuple(expand(nodes)) if nodes else self.job.nodes

    # -- signals -------------------------------------------------------------------
    def _on_signal(self, signum: int, _frame: object) -> None:
        self.stopped = signum
        for proc in (self.proc, self.early[0] if self.early else None):
            if proc is not None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signum)

    def run(self) -> int:
        previous = {sig: signal.signal(sig, self._on_signal) for sig in _STOPPING}
        try:
            return self._loop()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    # -- the steps -----------------------------------------------------------------
    def _loop(self) -> int:
        keep: tuple[str, ...] | None = None
        if self.can_restart:
            self.step_env[environment.BATCH_HOST] = self.job.node_name
            held = first_spares(self.allocation, self.job.node_name, self.opts.spares)
            if held:
                keep = tuple(n for n in self.allocation if n not in held)
                LOG.info(f"training on {', '.join(keep)}; spares {', '.join(held)}")
        adopted: subprocess.Popen[bytes] | None = None
        while True:
            self.step_env[environment.IN_PLACE] = str(self.in_place)
            attempt = attempt_key(self.job.restart_count, self.in_place)
            files = FolderLayout(self.folder)
            path = files.in_place_request(self.job.tag, attempt)
            spares = files.spare_release(self.job.tag, attempt)
            code = self._step(step_argv(self.opts.srun, keep), path, spares, adopted)
            request = read_request(path) if self.can_restart else None
            early, self.early = self.early, None
            adopted = None
            if request is None or self.stopped is not None or not request.keep:
                self._end_early(early)
            if request is None or self.stopped is not None:
                return code
            if not request.keep:
                LOG.info(f"the step ended as asked ({request.why})")
                return 0  # its checkpoint committed, and another job takes over from it
            resized = self._release(request)
            if resized is None:
                self._end_early(early)
                return code
            self.step_env = resized_env(self.step_env, resized)
            keep = request.keep
            self.in_place += 1
            if early is not None and early[1].keep == keep and early[0].poll() in (None, 0):
                # It started up meanwhile and takes over; or it has already done the job's
                # work and ended well: another step would train it all again.
                adopted = early[0]
            else:
                self._end_early(early)

    def _step(
        self,
        argv: Sequence[str],
        request: Path,
        spares: Path,
        adopted: subprocess.Popen[bytes] | None = None,
    ) -> int:
        """Run one step (or go on with ``adopted``, started early) to its end; end it once
        an in-place restart was asked and the training has had ``grace`` seconds to exit
        by itself. An early request starts the next step beside it (`_start_early`).
        Drained spares the watcher names are released while it runs."""
        try:
            self.proc = adopted or subprocess.Popen(list(argv), env=dict(self.step_env))
        except OSError as exc:
            raise UsageError(f"cannot start {argv[0]!r}: {exc.strerror}") from None
        asked_at: float | None = None
        termed_at: float | None = None
        early_tried = False
        spares_due = self.clock()
        while True:
            with contextlib.suppress(subprocess.TimeoutExpired):
                return exit_code(self.proc.wait(timeout=POLL))
            now = self.clock()
            if self.opts.spares and self.can_restart and asked_at is None and now >= spares_due:
                spares_due = now + SPARES_POLL
                self._release_spares(spares)
            if asked_at is None:
                if self.can_restart and trust.marked(request):
                    asked = read_request(request)
                    if asked is None or not asked.early:
                        asked_at = now
                    elif not early_tried:
                        early_tried = True
                        self._start_early(asked)
                continue
            if termed_at is None and now - asked_at >= self.opts.grace:
                LOG.info("the notice checkpoint has committed: ending the step")
                self.proc.send_signal(signal.SIGTERM)
                termed_at = now
            elif termed_at is not None and now - termed_at >= KILL_AFTER:
                self.proc.kill()

    def _start_early(self, request: Request) -> None:
        """Start the next step beside this one, on the kept nodes and the spare (once per
        step): its script starts up while this one trains, and waits for its checkpoint."""
        if self.stopped is not None:
            return
        env = dict(self.step_env)
        env[environment.IN_PLACE] = str(self.in_place + 1)
        env[environment.RELEASING] = ",".join(request.release)
        argv = step_argv(self.opts.srun, request.keep, overlap=True)
        try:
            self.early = (subprocess.Popen(argv, env=env), request)
        except OSError as exc:
            LOG.info(f"cannot start the next step early ({exc.strerror}): it starts after")
            return
        LOG.info(f"started the next step on {', '.join(request.keep)} beside this one")

    def _end_early(self, early: tuple[subprocess.Popen[bytes], Request] | None) -> None:
        """A step started early that will not take over ends (its script waits, untrained)."""
        if early is None or early[0].poll() is not None:
            return
        early[0].send_signal(signal.SIGTERM)
        try:
            early[0].wait(timeout=KILL_AFTER)
        except subprocess.TimeoutExpired:
            early[0].kill()
            early[0].wait()

    def _release_spares(self, path: Path) -> None:
        """Release the drained spares the watcher named that the job still holds; the step
        trains on (Slurm ends only the steps on released nodes, and this one has none)."""
        if not trust.marked(path):
            return
        allocation = self.allocation
        gone = [
            n
            for n in read_spares(path)
            if n in allocation and n != self.job.node_name and n not in self.spares_asked
        ]
        if not gone:
            return
        self.spares_asked.update(gone)  # tried once: a refusal is not sent again each second
        started = self.clock()
        try:
            resized = self.client.resize(self.job.job_id, [n for n in allocation if n not in gone])
        except SlurmpreError as exc:
            why = str(exc).splitlines()[0]
            LOG.info(f"cannot release spare {', '.join(gone)} ({why})")
            self._ledger(
                records.SpareReleased,
                released=(),
                release_s=round(self.clock() - started, 3),
                released_at=self.wall(),
                error=why,
            )
            return
        seconds = round(self.clock() - started, 3)
        self.step_env = resized_env(self.step_env, resized)
        LOG.info(f"released drained spare {', '.join(gone)} in {seconds:g} s; training goes on")
        self._ledger(
            records.SpareReleased,
            released=tuple(gone),
            release_s=seconds,
            released_at=self.wall(),
        )

    def _release(self, request: Request) -> dict[str, str | None] | None:
        """Release the drained nodes; the resized environment, or None after a requeue. The
        job keeps every node not released: the next step's and the spares left."""
        job = self.job
        started = self.clock()
        kept = [n for n in self.allocation if n not in request.release]
        # What the job still held of them (a drained spare may be released already).
        gone = tuple(n for n in request.release if n in self.allocation)
        try:
            resized = self.client.resize(job.job_id, kept)
        except SlurmpreError as exc:
            why = str(exc).splitlines()[0]
            LOG.info(f"cannot release {', '.join(gone)} ({why}): requeuing instead")
            self._ledger(records.InPlaceFailed, why=why)
            self._requeue(f"in-place restart failed: {why}")
            return None
        seconds = round(self.clock() - started, 3)
        LOG.info(
            f"released {', '.join(gone)} in {seconds:g} s; next step on {', '.join(request.keep)}"
        )
        self._ledger(
            records.InPlace,
            kept=tuple(request.keep),
            released=gone,
            release_s=seconds,
            requested_at=request.at,
            released_at=self.wall(),
            why=request.why,
            spares_in=request.spares_in or None,
        )
        return resized

    def _requeue(self, why: str) -> None:
        try:
            self.client.requeue(self.job.job_id)
        except SlurmpreError as exc:
            LOG.info(f"requeue failed too: {str(exc).splitlines()[0]}")
            return
        LOG.info(f"requeued job {self.job.job_id} ({why})")
        self._ledger(records.Requeued, why=why, requeued_at=self.wall())

    def _ledger(self, of: type[records.AttemptRecord], **fields: Any) -> None:
        """A record of the running step (its attempt's in-place count)."""
        try:
            self.ledger.append(
                of(
                    job=self.job.tag,
                    attempt=self.job.restart_count,
                    in_place=self.in_place,
                    **fields,
                )
            )
        except SlurmpreError as exc:
            LOG.info(str(exc))


def main(argv: Sequence[str] | None, env: Mapping[str, str]) -> int:
    """``env``: the process's environment, as `entry` read it."""

    def say(message: str) -> None:
        print(f"slurmpre[steps]: {message}", file=sys.stderr, flush=True)

    try:
        opts = parse_args(sys.argv[1:] if argv is None else argv)
        job = read_job_env(env)
        with lines.sent_to(say, "slurmpre.job", every_thread=True):  # the supervisor's own log
            return Steps(opts, job, env, CommandLineSlurm()).run()
    except SlurmpreError as exc:
        print(f"slurmpre steps: error: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
