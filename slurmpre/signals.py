"""The signals slurmpre gives a meaning to, shared by the login side and the job side."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator

# What the template's --signal sends before the time limit: the wrapper keeps it for itself,
# so a notice may not be relayed as it (`notice_signal`).
WARN_SIGNAL = signal.SIGUSR2
# What the wrapper passes on to the whole training tree: Slurm's cancel/timeout
# sequence (CONT, TERM), interrupts, and the signals users send with `scancel -s`.
FORWARDED = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGCONT,
)


class Latch:
    """Keeps the time of the first arrival of a signal; install it as the signal's handler.

    The wrapper installs one for `WARN_SIGNAL` before it imports anything else,
    so a warning that comes during start-up is kept, not fatal, and the watcher
    takes it as a notice once it runs.
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.at: float | None = None

    def __call__(self, _signum: int, _frame: object) -> None:
        if self.at is None:
            self.at = self.clock()


def quiet_thread(
    target: Callable[..., object], *, name: str, args: tuple[object, ...] = ()
) -> threading.Thread:
    """Start a daemon thread that never receives the signals the wrapper handles.

    Python runs signal handlers in the main thread only, but the kernel gives a
    process-wide signal to any thread that does not block it: one delivered to a
    helper thread leaves the main thread asleep in waitpid(), and the handler
    (forwarding SIGTERM, latching the warning) waits until the child exits. The
    new thread inherits a blocked mask, set and restored around its creation.
    """
    handled = {*FORWARDED, WARN_SIGNAL}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, handled)
    try:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        thread.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    return thread


@contextlib.contextmanager
def warning_blocked() -> Iterator[None]:
    """Block `WARN_SIGNAL` in this thread while a child is forked inside the block.

    Slurm sends the time-limit warning to every process of the job step (its
    process group under proctrack/pgid, its whole cgroup under proctrack/cgroup):
    an `scontrol` the wrapper runs at that instant, or its guard, would die of it.
    A child keeps the blocked mask across exec, so the warning stays pending there
    and never acts; the mask of the calling thread is restored on leaving.
    """
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {WARN_SIGNAL})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@contextlib.contextmanager
def terminating_held(on_signal: Callable[[int], None]) -> Iterator[None]:
    """Inside the block, a signal that would end this process calls ``on_signal`` instead.

    Once the child has exited, the wrapper still has records to write: a
    requeue makes Slurm signal every process of the step while ``scontrol
    requeue`` is returning, and the record of that requeue must not die with the
    wrapper. Slurm's SIGKILL, ``KillWait`` seconds later, still ends it.
    """
    held = [s for s in FORWARDED if s != signal.SIGCONT]
    previous = {sig: signal.signal(sig, lambda signum, _frame: on_signal(signum)) for sig in held}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def notice_signal(text: str) -> signal.Signals:
    """The signal named by ``text`` (``USR1``, ``SIGTERM``: a name, since numbers differ
    between architectures); ValueError saying why it cannot carry a notice."""
    name = text.strip().upper()
    sig = signal.Signals.__members__.get(name if name.startswith("SIG") else f"SIG{name}")
    if sig is None:
        raise ValueError("is not a signal name such as USR1 or TERM")
    if sig in (signal.SIGKILL, signal.SIGSTOP):
        raise ValueError(
            "cannot be caught: the training could not checkpoint on it, only die or stop"
        )
    if sig == WARN_SIGNAL:
        raise ValueError(f"is reserved ({WARN_SIGNAL.name} carries Slurm's time-limit warning)")
    return sig
