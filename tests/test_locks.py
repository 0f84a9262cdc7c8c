"""The checkpoint folder's locks: one holder at a time, across processes and against
filelock (the login side's lock library takes the same flock)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from filelock import FileLock
from slurmpre.folder.locks import FolderLock, LockTimeout


def test_a_held_lock_times_out_for_another_holder_and_is_free_after(tmp_path: Path) -> None:
    path = tmp_path / "writing.lock"
    first = FolderLock(path, timeout=0)
    with first:
        with pytest.raises(LockTimeout, match=r"within 0\.2 s"):
            FolderLock(path, timeout=0.2).acquire()
        with first:  # reentrant in one object: held still after the inner release
            pass
        with pytest.raises(LockTimeout):
            FolderLock(path, timeout=0).acquire()
    with FolderLock(path, timeout=0):
        pass


def test_filelock_and_slurmpres_lock_exclude_each_other(tmp_path: Path) -> None:
    path = tmp_path / "ledger.lock"
    with FileLock(str(path), timeout=0), pytest.raises(LockTimeout):
        FolderLock(path, timeout=0).acquire()
    with FolderLock(path, timeout=0), pytest.raises(TimeoutError):
        FileLock(str(path), timeout=0).acquire()


def test_another_process_waits_until_the_holder_lets_go(tmp_path: Path) -> None:
    path = tmp_path / "writing.lock"
    ready = tmp_path / "held"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time, pathlib\n"
         "from slurmpre.folder.locks import FolderLock\n"
         f"with FolderLock(pathlib.Path({str(path)!r}), timeout=5):\n"
         f"    pathlib.Path({str(ready)!r}).touch()\n"
         "    sys.stdin.read()\n"],
        stdin=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert time.monotonic() < deadline, "the holder never took the lock"
            time.sleep(0.05)
        with pytest.raises(LockTimeout):
            FolderLock(path, timeout=0.1).acquire()
        assert holder.stdin is not None
        holder.stdin.close()  # the holder lets go and exits
        with FolderLock(path, timeout=30):
            pass
    finally:
        holder.kill()
        holder.wait()


def test_the_lock_file_gets_the_mode_asked_for_whatever_the_umask(tmp_path: Path) -> None:
    import os

    old = os.umask(0)
    try:
        with FolderLock(tmp_path / "a.lock", timeout=0, mode=0o600):
            pass
    finally:
        os.umask(old)
    assert (tmp_path / "a.lock").stat().st_mode & 0o777 == 0o600
