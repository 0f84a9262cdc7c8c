"""Replace a file so that a crash at any instant leaves the old or the new content, whole."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def fsync_path(path: Path, *, directory: bool = False) -> None:
    """Flush a file's (or a folder's entries') data to disk."""
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# A new name of its own (O_EXCL, never through a link): one made in advance by someone
# else, a link among them, is never written through.
NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def temp_name(name: str) -> str:
    """A temporary name beside ``name`` that no one can have guessed in advance."""
    return f".{name}.tmp-{os.getpid()}-{os.urandom(4).hex()}"


def write_new(
    name: str | Path, raw: bytes, mode: int | None = None, *, dir_fd: int | None = None
) -> None:
    """Create ``name`` (it must not exist), write ``raw`` whole and fsync it; with
    ``mode`` exactly that mode, whatever the umask. A failure leaves nothing behind (a
    name that existed before is not this call's, and is left alone)."""
    fd = os.open(name, NEW_FILE, 0o644 if mode is None else mode, dir_fd=dir_fd)
    try:
        try:
            if mode is not None:
                os.fchmod(fd, mode)
            view = memoryview(raw)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=dir_fd)
        raise


def write_atomic(path: Path, data: str | bytes, *, mode: int | None = None) -> None:
    """Write a temporary file beside ``path``, fsync it, rename it over ``path``, fsync the folder.

    With ``mode`` the file gets exactly that mode, whatever the umask.
    Raises OSError; the temporary file never outlives a failed write.
    """
    raw = data.encode() if isinstance(data, str) else data
    tmp = path.with_name(temp_name(path.name))
    write_new(tmp, raw, mode)
    try:
        tmp.replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    with contextlib.suppress(OSError):  # some shared filesystems refuse a folder fsync
        fsync_path(path.parent, directory=True)
