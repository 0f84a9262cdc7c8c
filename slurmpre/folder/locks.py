"""The locks in a checkpoint folder (``.slurmpre/ledger.lock``, ``writing.lock``).

An exclusive ``flock`` on a file that stays in place, which is what filelock's
`FileLock` takes on Unix too, so either side of a lock may be held by the other
(a test holds one with filelock). slurmpre's own, because the in-job wrapper
takes these locks on its way to the training: filelock 4 costs about 50 ms to
import on the sandbox (stock), a third of the wrapper's start-up budget, for one
system call. The login side's own bookkeeping (``jobs.jsonl``, the sandbox)
still uses filelock.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from types import TracebackType

from slurmpre.errors import SlurmpreError
from slurmpre.folder import trust
from slurmpre.folder.access import set_mode


class LockTimeout(SlurmpreError, TimeoutError):
    """The lock was held by another for the whole timeout."""

    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__(f"could not lock {path} within {timeout:g} s")
        self.path = path


class FolderLock:
    """``with FolderLock(path, timeout=10): ...``; reentrant in one object, like filelock's
    (acquiring it again while held only counts), and never shared between objects."""

    POLL = 0.05

    def __init__(self, path: Path, *, timeout: float, mode: int = 0o600) -> None:
        self.path = Path(path)
        self.timeout = timeout
        self.mode = mode
        self._fd: int | None = None
        self._count = 0

    def acquire(self, timeout: float | None = None) -> FolderLock:
        """Take the lock, waiting up to ``timeout`` seconds (the object's by default;
        0: one try); LockTimeout when another holds it that long, OSError when the
        lock file cannot be opened."""
        if self._fd is not None:
            self._count += 1
            return self
        wait = self.timeout if timeout is None else timeout
        # The user's own file in a folder no one else writes, never through a link: a
        # lock file that is a link, or someone else's, is refused (Untrusted).
        fd = trust.open_own(self.path, self.mode)
        set_mode(fd, self.mode)  # whatever the umask was (filelock does the same)
        deadline = time.monotonic() + max(wait, 0.0)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise LockTimeout(self.path, wait) from None
                    time.sleep(min(self.POLL, max(deadline - time.monotonic(), 0.0)))
        except BaseException:
            os.close(fd)
            raise
        self._fd, self._count = fd, 1
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        self._count -= 1
        if self._count > 0:
            return
        fd, self._fd = self._fd, None
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()
