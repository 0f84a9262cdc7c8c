"""Saying what a login command waits for: a wait of seconds to minutes (the nodes'
python importing slurmpre, a checkpoint being written before a prune or a cancel)
must not look like a hang.

On a terminal one line, redrawn twice a second, says what is awaited and for how
long; elsewhere (a log, a pipe, a notebook) a plain line when the wait has lasted
``PLAIN_AFTER`` seconds, and one when it ends. Silent unless a stream is set: the
command line sets ``STREAM`` to stderr; the Python API leaves it to the caller.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from slurmpre.folder.locks import FolderLock, LockTimeout

STREAM: TextIO | None = None  # where waits are shown (the CLI: sys.stderr)
REDRAW = 0.5  # seconds between a terminal line's redraws
PLAIN_AFTER = 2.0  # a plain stream hears of a wait that lasts this long
_SPIN = "|/-\\"


@contextmanager
def waiting(what: str, stream: TextIO | None = None) -> Iterator[None]:
    """Show that ``what`` ("waiting for the checkpoint being written") is awaited while
    the block runs."""
    out = stream if stream is not None else STREAM
    if out is None:
        yield
        return
    tty = _is_tty(out)
    done = threading.Event()
    start = time.monotonic()
    told = threading.Event()

    def show() -> None:
        n = 0
        while not done.wait(REDRAW if tty else PLAIN_AFTER):
            elapsed = time.monotonic() - start
            try:
                if tty:
                    out.write(f"\r{_SPIN[n % 4]} slurmpre: {what} ({elapsed:.0f} s)\033[K")
                    n += 1
                elif not told.is_set():
                    out.write(f"slurmpre: {what} ...\n")
                    told.set()
                out.flush()
            except (OSError, ValueError):
                return  # the stream went away: the wait goes on unseen

    thread = threading.Thread(target=show, name="slurmpre-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        elapsed = time.monotonic() - start
        try:
            if tty:
                out.write("\r\033[K")
            elif told.is_set():
                out.write(f"slurmpre: {what}: over after {elapsed:.0f} s\n")
            out.flush()
        except (OSError, ValueError):
            pass


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def acquire(lock: FolderLock, what: str) -> FolderLock:
    """Take ``lock`` (within its own timeout), showing ``what`` is awaited only when it
    is not free at once; LockTimeout as the lock raises it."""
    try:
        return lock.acquire(0)
    except LockTimeout:
        pass
    with waiting(f"{what} (up to {lock.timeout:g} s)"):
        return lock.acquire()
