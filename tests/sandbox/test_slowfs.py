"""The shared filesystem's arithmetic and its operations, with no FUSE mount: the token
bucket on a fake clock, and `SlowFS`'s calls on a backing folder, called directly."""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import threading
from pathlib import Path

import pytest
from slurmpre.sandbox import slowfs
from slurmpre.sandbox.slowfs import MB, SlowFS, TokenBucket


class Clock:
    """A clock that moves only when something sleeps on it."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_n_mbps_is_n_million_bytes_a_second() -> None:
    assert MB == 10**6


def test_the_bucket_lets_its_burst_through_then_the_rate() -> None:
    clock = Clock()
    bucket = TokenBucket(8 * MB, clock=clock, sleep=clock.sleep)
    assert bucket.burst == 8 * MB * slowfs.BURST_S  # 50 ms of bandwidth
    assert bucket.reserve(int(bucket.burst)) == 0.0  # a full bucket: at once
    assert bucket.reserve(8 * MB) == pytest.approx(1.0)  # then a second a rate's worth
    assert bucket.reserve(4 * MB) == pytest.approx(1.5)  # in arrival order, behind it
    clock.now += 1.5
    assert bucket.reserve(0) == 0.0  # the debt is paid


def test_an_idle_bucket_holds_no_more_than_its_burst() -> None:
    clock = Clock()
    bucket = TokenBucket(1 * MB, burst=100_000, clock=clock, sleep=clock.sleep)
    clock.now += 3600  # an hour idle saves up 100 kB, not 3.6 GB
    assert bucket.reserve(1_100_000) == pytest.approx(1.0)


def test_a_long_copy_moves_at_the_rate() -> None:
    clock = Clock()
    bucket = TokenBucket(16 * MB, clock=clock, sleep=clock.sleep)
    start, chunk, total = clock(), 131_072, 200 * MB
    for _ in range(total // chunk):
        bucket.take(chunk)
    moved = total // chunk * chunk
    elapsed = clock() - start
    assert elapsed == pytest.approx((moved - bucket.burst) / (16 * MB))
    assert moved / elapsed / MB == pytest.approx(16, rel=0.01)


def test_callers_on_many_threads_share_one_budget() -> None:
    clock = Clock()  # frozen while they ask: each wait is the debt ahead of it
    bucket = TokenBucket(2 * MB, burst=0, clock=clock, sleep=clock.sleep)
    waits: list[float] = []
    lock = threading.Lock()

    def ask() -> None:
        for _ in range(50):
            wait = bucket.reserve(MB)
            with lock:
                waits.append(wait)

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(waits) == pytest.approx([(i + 1) * 0.5 for i in range(400)])


def test_a_rate_of_nothing_is_refused() -> None:
    with pytest.raises(ValueError, match="above 0"):
        TokenBucket(0)


# -- the operations, called as mfusepy calls them ----------------------------------------
class Counted:
    """Stands for the bucket: counts the bytes taken."""

    def __init__(self) -> None:
        self.taken = 0

    def take(self, nbytes: int) -> None:
        self.taken += nbytes


@pytest.fixture
def fs(tmp_path: Path) -> tuple[SlowFS, Path, Counted]:
    backing = tmp_path / "backing"
    backing.mkdir()
    counted = Counted()
    ops = SlowFS(str(backing), counted, caller=lambda: (os.getuid(), os.getgid()))  # type: ignore[arg-type]
    return ops, backing, counted


def test_reads_and_writes_both_go_through_the_one_budget(
    fs: tuple[SlowFS, Path, Counted],
) -> None:
    ops, backing, counted = fs
    fh = ops.create("/f", 0o644, os.O_RDWR)
    assert ops.write("/f", b"x" * 1000, 0, fh) == 1000
    assert ops.read("/f", 4096, 0, fh) == b"x" * 1000  # a short read costs what it moved
    assert counted.taken == 2000
    ops.release("/f", fh)
    assert (backing / "f").read_bytes() == b"x" * 1000


def test_fsync_fdatasync_and_a_writers_flush_reach_the_backing_file(
    fs: tuple[SlowFS, Path, Counted], monkeypatch: pytest.MonkeyPatch
) -> None:
    ops, _, _ = fs
    synced: list[tuple[str, int]] = []
    real_fsync, real_fdatasync = os.fsync, os.fdatasync

    def fsync(fd: int) -> None:
        synced.append(("fsync", fd))
        real_fsync(fd)

    def fdatasync(fd: int) -> None:
        synced.append(("fdatasync", fd))
        real_fdatasync(fd)

    monkeypatch.setattr(slowfs.os, "fsync", fsync)
    monkeypatch.setattr(slowfs.os, "fdatasync", fdatasync)
    fh = ops.create("/f", 0o644, os.O_WRONLY)
    ops.write("/f", b"data", 0, fh)
    ops.fsync("/f", 0, fh)
    ops.fsync("/f", 1, fh)
    ops.flush("/f", fh)  # close(2) of a file written through this handle
    assert synced == [("fsync", fh), ("fdatasync", fh), ("fsync", fh)]
    ops.release("/f", fh)
    reader = ops.open("/f", os.O_RDONLY)
    ops.flush("/f", reader)  # nothing to make durable
    ops.release("/f", reader)
    folder = ops.opendir("/")
    ops.fsyncdir("/", 0, folder)  # a rename made durable
    ops.releasedir("/", folder)
    assert synced[3:] == [("fsync", folder)]


def test_what_a_caller_makes_is_theirs(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("making a file another user's needs root")
    backing = tmp_path / "backing"
    (backing / "team").mkdir(parents=True)
    (backing / "team").chmod(0o2777)  # set-group-ID: new files take the folder's group
    os.chown(backing / "team", 0, 4242)
    ops = SlowFS(str(backing), None, caller=lambda: (65534, 65534))
    ops.release("/f", ops.create("/f", 0o640, os.O_WRONLY))
    ops.mkdir("/d", 0o750)
    ops.symlink("/l", "f")
    ops.release("/team/g", ops.create("/team/g", 0o600, os.O_WRONLY))
    owners = {
        name: (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode))
        for name in ("f", "d", "l", "team/g")
        for st in [os.lstat(backing / name)]
    }
    assert owners["f"] == (65534, 65534, 0o640)
    assert owners["d"] == (65534, 65534, 0o750)
    assert owners["l"][:2] == (65534, 65534)
    assert owners["team/g"] == (65534, 4242, 0o600)


def test_names_links_and_attributes_pass_through(fs: tuple[SlowFS, Path, Counted]) -> None:
    ops, backing, _ = fs
    ops.release("/a", ops.create("/a", 0o644, os.O_WRONLY))
    ops.link("/hard", "/a")  # mfusepy's order: the new name, then the file
    ops.symlink("/soft", "a")  # the new link, then what it holds
    assert (backing / "a").samefile(backing / "hard")
    assert ops.readlink("/soft") == "a"
    ops.mkdir("/d", 0o755)
    assert sorted(ops.readdir("/", 0)) == sorted([".", "..", "a", "hard", "soft", "d"])
    ops.rename("/a", "/d/b")
    ops.truncate("/d/b", 10)
    attrs = ops.getattr("/d/b")
    assert attrs["st_size"] == 10 and stat.S_ISREG(attrs["st_mode"]) and attrs["st_nlink"] == 2
    assert attrs["st_mtime"] == (backing / "d" / "b").stat().st_mtime_ns  # nanoseconds
    ops.chmod("/d/b", stat.S_IFREG | 0o600)
    assert stat.S_IMODE((backing / "d" / "b").stat().st_mode) == 0o600
    ops.utimens("/d/b", (5 * 10**9, slowfs.UTIME_OMIT))  # touch -a: the mtime stays
    st = (backing / "d" / "b").stat()
    assert st.st_atime_ns == 5 * 10**9 and st.st_mtime_ns == attrs["st_mtime"]
    ops.unlink("/d/b")
    ops.unlink("/hard")
    ops.unlink("/soft")
    ops.rmdir("/d")
    assert list(backing.iterdir()) == []
    assert ops.statfs("/")["f_bsize"] > 0


def test_a_rename_that_must_not_replace_does_not(fs: tuple[SlowFS, Path, Counted]) -> None:
    ops, backing, _ = fs
    if getattr(ctypes.CDLL(None), "renameat2", None) is None:
        pytest.skip("this C library has no renameat2")
    (backing / "a").write_text("a")
    (backing / "b").write_text("b")
    with pytest.raises(OSError) as info:
        ops.rename("/a", "/b", 1)  # RENAME_NOREPLACE
    assert info.value.errno == errno.EEXIST and (backing / "b").read_text() == "b"
    ops.rename("/a", "/b", 2)  # RENAME_EXCHANGE
    assert (backing / "a").read_text() == "b" and (backing / "b").read_text() == "a"
