"""A shared filesystem of capped bandwidth: a FUSE passthrough onto a backing folder, every
read and write of every process through one `TokenBucket` of ``--mbps N`` (N * 10**6
bytes a second). One budget for both directions, as a provider's volume has one quota: a
flush that writes while a successor reads its checkpoint back must slow the read. fsync,
fdatasync and the close of a file written reach the backing file's own (as NFS commits on
close). See docs/sandbox.md ("A shared filesystem of capped bandwidth").

Run by `slurmpre.sandbox.shared_fs` as::

    python -m slurmpre.sandbox.slowfs BACKING MOUNTPOINT --mbps N --name NAME

It serves until unmounted or sent SIGTERM. It needs libfuse 3 and mfusepy; this module
imports without them.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import errno
import os
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

MB = 1_000_000  # --mbps N is N * MB bytes a second
BURST_S = 0.05  # the bucket holds this many seconds of bandwidth when idle
UTIME_NOW = (1 << 30) - 1  # utimensat(2)'s special nanoseconds, as libfuse passes them on
UTIME_OMIT = (1 << 30) - 2
FUSE_LIBRARY = "fuse3"  # mfusepy would take libfuse 2 first where both are installed


class TokenBucket:
    """``rate`` bytes a second (up to ``burst`` at once) for every caller together, in
    arrival order. The budget may go below zero: a request larger than the bucket is
    allowed, and the callers after it wait for the debt to be paid. Thread-safe."""

    def __init__(
        self,
        rate: float,
        burst: float | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not rate > 0:
            raise ValueError(f"rate must be above 0 bytes a second, got {rate}")
        self.rate = rate
        self.burst = rate * BURST_S if burst is None else burst
        self._clock = clock
        self._sleep = sleep
        self._tokens = self.burst
        self._at = clock()
        self._lock = threading.Lock()

    def reserve(self, nbytes: int) -> float:
        """Take ``nbytes`` now; the seconds the caller waits before it moves them."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
            self._at = now
            self._tokens -= nbytes
            return max(0.0, -self._tokens / self.rate)

    def take(self, nbytes: int) -> None:
        """Wait until ``nbytes`` may move (other callers go on meanwhile)."""
        wait = self.reserve(nbytes)
        if wait > 0:
            self._sleep(wait)


def _oserror(code: int) -> OSError:
    return OSError(code, os.strerror(code))


_libc = ctypes.CDLL(None, use_errno=True)
_AT_FDCWD = -100


def _renameat2(old: str, new: str, flags: int) -> None:
    """rename(2) with RENAME_NOREPLACE or RENAME_EXCHANGE, which os.rename cannot pass."""
    call = getattr(_libc, "renameat2", None)
    if call is None:
        raise _oserror(errno.EINVAL)
    if call(_AT_FDCWD, os.fsencode(old), _AT_FDCWD, os.fsencode(new), flags) != 0:
        raise _oserror(ctypes.get_errno())


@contextlib.contextmanager
def as_caller(uid: int, gid: int) -> Iterator[None]:
    """This thread's filesystem identity is the caller's while it acts for them.

    The kernel checked the caller against the file it looked up (``default_permissions``);
    the server, root, then acts on a path in the backing folder, which a caller may have
    changed meanwhile (a name swapped for a link to /etc/shadow, through the mount in
    another thread). With the caller's fsuid and fsgid (Linux: per thread; a non-zero
    fsuid drops root's file capabilities) the host kernel judges that path as the caller,
    so no operation can reach what the caller could not, and what it makes is theirs.
    The process has no supplementary groups (`main`): a caller's are not honoured."""
    if uid == 0:
        yield
        return
    _libc.setfsgid(gid)
    _libc.setfsuid(uid)
    try:
        yield
    finally:
        _libc.setfsuid(0)
        _libc.setfsgid(0)


StatAttrs = dict[str, int]
STAT_FIELDS = (
    "st_mode", "st_ino", "st_dev", "st_nlink", "st_uid", "st_gid", "st_size", "st_rdev",
    "st_blocks", "st_blksize",
)  # fmt: skip


class SlowFS:
    """The operations mfusepy calls (paths are the mount's, from ``/``), done on the backing
    folder by this process (root) with the caller's identity applied to what it makes.
    ``caller`` says who asks (uid, gid); ``bucket`` caps the bytes (None: no cap)."""

    use_ns = True  # times in nanoseconds

    def __init__(
        self,
        backing: str,
        bucket: TokenBucket | None,
        caller: Callable[[], tuple[int, int]] = lambda: (0, 0),
    ) -> None:
        self.backing = os.path.abspath(backing)
        self.bucket = bucket
        self.caller = caller
        self._writable: set[int] = set()  # handles opened for writing: a flush syncs them

    def _at(self, path: str) -> str:
        return os.path.join(self.backing, path.lstrip("/"))

    def _own(self, full: str, fd: int | None = None) -> None:
        """Make a new file the caller's (its group the folder's, in a set-group-ID folder)."""
        uid, gid = self.caller()
        parent = os.stat(os.path.dirname(full))
        if parent.st_mode & stat.S_ISGID:
            gid = parent.st_gid
        if fd is not None:
            os.fchown(fd, uid, gid)
        else:
            os.lchown(full, uid, gid)

    # -- attributes ------------------------------------------------------------------
    def getattr(self, path: str, fh: int | None = None) -> StatAttrs:
        st = os.fstat(fh) if fh is not None else os.lstat(self._at(path))
        attrs = {name: getattr(st, name) for name in STAT_FIELDS}
        attrs.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
        return attrs

    def chmod(self, path: str, mode: int) -> int:
        os.chmod(self._at(path), stat.S_IMODE(mode))
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        os.lchown(self._at(path), uid, gid)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        full = self._at(path)
        if times is None:
            os.utime(full, follow_symlinks=False)
            return 0
        st = os.lstat(full)
        now = time.time_ns()
        current = (st.st_atime_ns, st.st_mtime_ns)
        ns = tuple(
            now if t == UTIME_NOW else was if t == UTIME_OMIT else t
            for t, was in zip(times, current, strict=True)
        )
        os.utime(full, ns=(ns[0], ns[1]), follow_symlinks=False)
        return 0

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        if fh is not None:
            os.ftruncate(fh, length)
        else:
            os.truncate(self._at(path), length)
        return 0

    def statfs(self, path: str) -> StatAttrs:
        st = os.statvfs(self._at(path))
        names = ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files",
                 "f_ffree", "f_favail", "f_namemax")  # fmt: skip
        return {name: getattr(st, name) for name in names}

    # -- names -----------------------------------------------------------------------
    def readlink(self, path: str) -> str:
        return os.readlink(self._at(path))

    def mknod(self, path: str, mode: int, dev: int) -> int:
        full = self._at(path)
        os.mknod(full, mode, dev)
        self._own(full)
        return 0

    def mkdir(self, path: str, mode: int) -> int:
        full = self._at(path)
        os.mkdir(full, mode)
        self._own(full)
        return 0

    def symlink(self, target: str, source: str) -> int:
        """``target``: the new link (a path of the mount); ``source``: what it holds."""
        full = self._at(target)
        os.symlink(source, full)
        self._own(full)
        return 0

    def link(self, target: str, source: str) -> int:
        """``target``: the new name; ``source``: the file it names too."""
        os.link(self._at(source), self._at(target))
        return 0

    def unlink(self, path: str) -> int:
        os.unlink(self._at(path))
        return 0

    def rmdir(self, path: str) -> int:
        os.rmdir(self._at(path))
        return 0

    def rename(self, old: str, new: str, flags: int = 0) -> int:
        if flags:
            _renameat2(self._at(old), self._at(new), flags)
        else:
            os.rename(self._at(old), self._at(new))
        return 0

    # -- folders ---------------------------------------------------------------------
    def opendir(self, path: str) -> int:
        return os.open(self._at(path), os.O_RDONLY | os.O_DIRECTORY)

    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *os.listdir(self._at(path))]

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        os.fsync(fh)
        return 0

    def releasedir(self, path: str, fh: int) -> int:
        os.close(fh)
        return 0

    # -- files -----------------------------------------------------------------------
    def _opened(self, fd: int, flags: int) -> int:
        if flags & os.O_ACCMODE != os.O_RDONLY:
            self._writable.add(fd)
        return fd

    def open(self, path: str, flags: int) -> int:
        return self._opened(os.open(self._at(path), flags & ~os.O_CREAT), flags)

    def create(self, path: str, mode: int, flags: int) -> int:
        full = self._at(path)
        try:
            fd = os.open(full, flags | os.O_CREAT | os.O_EXCL, stat.S_IMODE(mode))
        except FileExistsError:
            if flags & os.O_EXCL:
                raise
            return self._opened(os.open(full, flags & ~os.O_CREAT), flags)  # made meanwhile
        self._own(full, fd)
        return self._opened(fd, flags)

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        data = os.pread(fh, size, offset)
        if self.bucket is not None:
            self.bucket.take(len(data))
        return data

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        if self.bucket is not None:
            self.bucket.take(len(data))
        return os.pwrite(fh, data, offset)

    def fallocate(self, path: str, mode: int, offset: int, size: int, fh: int) -> int:
        if mode:
            raise _oserror(errno.EOPNOTSUPP)
        os.posix_fallocate(fh, offset, size)
        return 0

    def flush(self, path: str, fh: int) -> int:
        if fh in self._writable:
            os.fsync(fh)
        return 0

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        if datasync:
            os.fdatasync(fh)
        else:
            os.fsync(fh)
        return 0

    def release(self, path: str, fh: int) -> int:
        self._writable.discard(fh)
        os.close(fh)
        return 0


def _mount(ops: SlowFS, mountpoint: str, name: str) -> None:
    """Serve ``ops`` at ``mountpoint`` until unmounted (mfusepy over libfuse 3)."""
    os.environ.setdefault("FUSE_LIBRARY_NAME", FUSE_LIBRARY)
    import mfusepy

    class FUSE(mfusepy.FUSE):  # type: ignore[misc]
        def _wrapper(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            # Every operation on the backing folder as its caller (`as_caller`).
            uid, gid, _pid = mfusepy.fuse_get_context()
            with as_caller(int(uid), int(gid)):
                return super()._wrapper(func, *args, **kwargs)

        # mfusepy drops rename's flags (RENAME_NOREPLACE, RENAME_EXCHANGE): pass them on.
        def rename_fuse_3(self, old: bytes, new: bytes, flags: int) -> int:
            def decode(name: bytes) -> str:
                return str(name.decode(self.encoding, self.errors))

            return int(self.operations.rename(decode(old), decode(new), flags))

    def caller() -> tuple[int, int]:
        uid, gid, _pid = mfusepy.fuse_get_context()
        return int(uid), int(gid)

    ops.caller = caller
    FUSE(
        ops,
        mountpoint,
        foreground=True,
        allow_other=True,
        default_permissions=True,
        fsname=name,
        subtype="slowfs",
    )


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m slurmpre.sandbox.slowfs",
        description="Mount BACKING at MOUNTPOINT through FUSE, reads and writes capped "
        "together at --mbps MB/s (10**6 bytes a second).",
    )
    parser.add_argument("backing")
    parser.add_argument("mountpoint")
    parser.add_argument("--mbps", type=float, default=None, help="the cap (default: none)")
    parser.add_argument("--name", default="slowfs", help="the mount's source in /proc/mounts")
    args = parser.parse_args(list(argv))
    if args.mbps is not None and not 0 < args.mbps < float("inf"):
        parser.error(f"--mbps must be above 0, got {args.mbps}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    os.umask(0)  # the modes callers ask for (the kernel applied their umask already)
    os.setgroups([])  # root's groups never lend a caller theirs (`as_caller`)
    bucket = None if args.mbps is None else TokenBucket(args.mbps * MB)
    _mount(SlowFS(args.backing, bucket), args.mountpoint, args.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
