"""Run the training command as the wrapper's child, in a session of its own with the
time-limit warning ignored (the warning is the wrapper's: it reaches the training only
as the notice), pass Slurm's other signals on to its process group, and guard its tree
(`guard`). See docs/how-it-works.md ("What runs inside the job").
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from slurmpre import procs
from slurmpre.errors import UsageError
from slurmpre.job.watch.notice import read_notice
from slurmpre.signals import FORWARDED, WARN_SIGNAL, quiet_thread, warning_blocked

TRACK_SECONDS = 2.0
# POSIX: a signal ignored when exec is called stays ignored in the new program.
_IGNORE_WARNING = (
    "/bin/sh",
    "-c",
    f'trap "" {WARN_SIGNAL.name.removeprefix("SIG")}; exec "$@"',
    "slurmpre-child",
)
_TERMINATING = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT})


def exit_code(returncode: int) -> int:
    """Popen's returncode (negative for a signal) -> a shell's exit status."""
    return returncode if returncode >= 0 else 128 - returncode


class Supervisor:
    """One child at a time: forward signals to it, guard its tree, wait for it."""

    def __init__(self) -> None:
        self.child: subprocess.Popen[bytes] | None = None
        self.pending: list[int] = []
        self.stopped: int | None = None  # the signal that came before the child could start
        self._previous: dict[int, object] = {}
        self._done = threading.Event()

    def _forward(self, signum: int, _frame: object) -> None:
        child = self.child
        if child is None:
            self.pending.append(signum)
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signum)

    def __enter__(self) -> Supervisor:
        for sig in FORWARDED:
            self._previous[sig] = signal.signal(sig, self._forward)
        return self

    def __exit__(self, *_exc: object) -> None:
        self._done.set()
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        self.terminate()  # stragglers of the child's group (a worker that outlived its launcher)

    def start(
        self, command: Sequence[str], env: Mapping[str, str]
    ) -> subprocess.Popen[bytes] | None:
        """Start the child (None when a terminating signal came first)."""
        stopping = [s for s in self.pending if s in _TERMINATING]
        if stopping:
            self.stopped = stopping[0]
            self.pending.clear()
            return None
        guard = _start_guard()
        try:
            with warning_blocked():  # and the shim ignores it: no window at the fork
                child = subprocess.Popen(
                    [*_IGNORE_WARNING, *command], env=dict(env), start_new_session=True
                )
        except OSError as exc:
            raise UsageError(f"cannot start {command[0]!r}: {exc.strerror}") from None
        self.child = child
        for signum in self.pending:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signum)
        self.pending.clear()
        if guard is not None:
            quiet_thread(_track, args=(guard, child, self._done), name="slurmpre-guard")
        return child

    def terminate(self) -> None:
        """End the child's whole group (SIGTERM), from any thread."""
        if self.child is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.child.pid, signal.SIGTERM)

    def wait(self) -> int:
        if self.child is None:
            raise RuntimeError("Supervisor.wait() before a child was started")
        return exit_code(self.child.wait())


def _start_guard() -> subprocess.Popen[str] | None:
    """The guard (`slurmpre.job.start.guard`), or None when it cannot start."""
    try:
        with warning_blocked():  # Slurm's warning reaches every process of the step
            return subprocess.Popen(
                [sys.executable, "-m", "slurmpre.job.start.guard"],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                text=True,
            )
    except OSError:
        return None  # no guard: Slurm's own kill still applies


def _track(
    guard: subprocess.Popen[str], child: subprocess.Popen[bytes], done: threading.Event
) -> None:
    stdin = guard.stdin
    if stdin is None:
        return
    while True:
        tree = {child.pid} | procs.descendants([child.pid])
        lines = [f"{pid} {start}" for pid in tree if (start := procs.start_time(pid))]
        try:
            stdin.write("\n".join(lines) + "\n\n")
            stdin.flush()
        except (BrokenPipeError, ValueError):
            return
        if done.wait(TRACK_SECONDS):
            return  # the stream stays open until this process ends


def relay_notice(
    path: Path,
    child: subprocess.Popen[bytes],
    sig: signal.Signals,
    stop: threading.Event,
    *,
    workers: bool,
    taken: Callable[[], None] = lambda: None,
) -> None:
    """On every node: when the notice file appears, send ``sig`` once to the training
    processes: the child itself (the plain launcher), or, under a launcher (torchrun,
    accelerate launch), its workers, its direct children. Never the launcher: torchrun
    ends every worker on SIGTERM, and dies of SIGUSR1, before any of them could save.
    Never a whole process group either: a worker's data-loading processes would die of
    the signal its handler was written for. Then ``taken``: the script was told, so its
    exit is its stop on the notice, not the end of its work."""
    while not stop.wait(1.0):
        if read_notice(path) is None:
            continue
        targets = {child.pid}
        while workers:
            targets = procs.children(child.pid)
            if targets or child.poll() is not None:
                break  # a launcher still starting its workers: they get it once there
            if stop.wait(0.2):
                return
        for pid in targets:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        if targets:
            taken()
        return
