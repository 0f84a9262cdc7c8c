"""Reading what a folder holds when anything may be there: regular files only, opened
without blocking, bounded, never through a link that leads out of the folder (docs/login.md,
"Only regular files are read"). Their errors are OSErrors with a ``strerror`` that says
what was wrong, so callers that already handle unreadable files handle these.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from slurmpre.errors import SlurmpreError

# Bounds for what slurmpre reads whole, by what the file is.
SMALL = 1 << 16  # a tag, a choice, a notice: a line or a few
MEDIUM = 1 << 24  # a spec, a template, an index of shards (16 MiB)
LARGE = 1 << 26  # a marker's manifest, a DCP .metadata, a trainer_state.json (64 MiB)


class UnsafeFile(SlurmpreError, OSError):
    """Not something slurmpre reads: not a regular file, too large, or outside its folder.
    An OSError too, with a ``strerror`` that says why, for callers that handle unreadable
    files."""

    def __init__(self, path: str | os.PathLike[str], why: str) -> None:
        OSError.__init__(self, errno.EINVAL, why, str(path))
        self.message = OSError.__str__(self)


def reachable(path: str | os.PathLike[str]) -> bool:
    """``path`` exists and this user may reach it: False, not an error, for a folder on the
    way the user may not search (another user's ~/bin on PATH) or a name too long."""
    try:
        Path(path).stat()
    except (OSError, ValueError):
        return False
    return True


def real_inside(path: str | os.PathLike[str], root: str) -> bool:
    """Does ``path`` lead, once every link at every level is followed, to ``root`` or below?
    (``root`` is a realpath already.)"""
    real = os.path.realpath(path)
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def open_regular(path: str | os.PathLike[str], *, root: str | None = None) -> BinaryIO:
    """``path`` opened for reading, once it is a regular file (inside ``root``, a realpath,
    when given). Opening never blocks: a FIFO is opened without waiting for a writer,
    then refused."""
    if root is not None and not real_inside(path, root):
        raise UnsafeFile(path, "a link to outside the folder")
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise UnsafeFile(path, f"not a regular file ({_kind(mode)})")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | os.PathLike[str], limit: int, *, root: str | None = None) -> bytes:
    """The whole of the regular file ``path``, at most ``limit`` bytes (UnsafeFile beyond)."""
    with open_regular(path, root=root) as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > limit:
            raise UnsafeFile(path, f"{size} bytes, more than the {limit} slurmpre reads here")
        data = fh.read(limit + 1)
    if len(data) > limit:  # it grew while we read
        raise UnsafeFile(path, f"more than the {limit} bytes slurmpre reads here")
    return data


def read_text(path: str | os.PathLike[str], limit: int, *, root: str | None = None) -> str:
    """read_regular, decoded as UTF-8 (a UnicodeDecodeError for a binary file)."""
    return read_regular(path, limit, root=root).decode()


# Lines of a records file already named as skipped, in this process: each is named once,
# however many readers read the file.
_SKIPPED: set[tuple[str, int, bytes]] = set()


def skip_line(
    path: str | os.PathLike[str], number: int, raw: bytes, why: str, warn: Callable[[str], None]
) -> None:
    """Say, once per process, that line ``number`` of ``path`` is skipped, and why."""
    key = (str(path), number, raw)
    if key not in _SKIPPED:
        _SKIPPED.add(key)
        warn(f"slurmpre: skipping line {number} of {path}: {why}")


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a file"
