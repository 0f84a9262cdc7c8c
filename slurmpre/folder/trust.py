"""The edge of a job's own folder: the files a job acts on, opened and checked as OpenSSH
checks ``authorized_keys``.

Every file in ``.slurmpre/`` that makes a job act goes through this module: the folder
opened with ``O_NOFOLLOW`` and its owner and mode checked on the descriptor, the file
opened relative to it, never through a link, and checked the same way; new names made
with ``O_EXCL``. Anything else is `Untrusted`, and the caller takes the safe way, never
the action. Who is trusted: the job's user and root (docs/security.md, 1).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
from pathlib import Path

from slurmpre.atomic import temp_name, write_new
from slurmpre.errors import CheckpointError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


class Untrusted(CheckpointError):
    """A file or folder slurmpre would act on that someone else could have written."""


def trusted_uids() -> frozenset[int]:
    """Whose files a job acts on: its own user's, and root's."""
    return frozenset({os.geteuid(), 0})


def owner_name(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (KeyError, ImportError):
        return f"uid {uid}"


def check(
    st: os.stat_result, path: str | os.PathLike[str], owners: frozenset[int] | None = None
) -> None:
    """Refuse (`Untrusted`) what is not the job's user's (or root's; or one of ``owners``),
    or that someone else may write."""
    if st.st_uid not in (trusted_uids() if owners is None else owners):
        raise Untrusted(
            f"not acting on {path}: it is owned by {owner_name(st.st_uid)}, "
            f"not by {owner_name(os.geteuid())}"
        )
    if st.st_mode & OTHERS_WRITE:
        who = "its group" if st.st_mode & stat.S_IWGRP else "everyone"
        raise Untrusted(
            f"not acting on {path}: {who} may write it (mode {stat.S_IMODE(st.st_mode):o})"
        )


def _real_dir(folder: Path, doing: str) -> int:
    """A descriptor of ``folder``, opened without following a link; Untrusted when it is a
    link or not a folder ("not ``doing`` ...")."""
    try:
        return os.open(folder, _DIR_FLAGS)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise Untrusted(f"not {doing} {folder}: it is a link or not a folder") from None
        raise


def open_dir(folder: Path, *, view: bool = False) -> int:
    """A descriptor of ``folder`` once it is a real folder (not a link), the user's, and
    writable by no one else; FileNotFoundError when it is missing. ``view``: anyone's
    folder (it is only read and shown), as long as only its owner writes it."""
    fd = _real_dir(folder, "acting on")
    try:
        st = os.fstat(fd)
        check(st, folder, frozenset({st.st_uid}) if view else None)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_in(path: Path, flags: int, mode: int = 0o600) -> int:
    """``path`` opened relative to its checked folder, without following a link."""
    dfd = open_dir(path.parent)
    try:
        return _at(dfd, path, flags, mode)
    finally:
        os.close(dfd)


def _at(dfd: int, path: Path, flags: int, mode: int = 0o600) -> int:
    try:
        return os.open(path.name, flags, mode, dir_fd=dfd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Untrusted(f"not acting on {path}: it is a link") from None
        raise


def read(path: Path, limit: int, *, view: bool = False) -> bytes:
    """The whole of ``path``, a regular file of the user's that no one else may write, in a
    folder of the same kind; at most ``limit`` bytes. FileNotFoundError when missing.
    ``view``: the folder's owner's file, whoever that is (for showing, never acting)."""
    dfd = open_dir(path.parent, view=view)
    try:
        owners = frozenset({os.fstat(dfd).st_uid}) | trusted_uids() if view else None
        fd = _at(dfd, path, _READ_FLAGS)
    finally:
        os.close(dfd)
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Untrusted(f"not acting on {path}: it is not a regular file")
        check(st, path, owners)
        if st.st_size > limit:
            raise Untrusted(f"not acting on {path}: {st.st_size} bytes, more than {limit}")
        os.set_blocking(fd, True)
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise Untrusted(f"not acting on {path}: more than {limit} bytes")
    return data


def read_text(path: Path, limit: int, *, view: bool = False) -> str:
    return read(path, limit, view=view).decode()


def exists(path: Path) -> bool:
    """Whether the user's own file ``path`` is there (a mark); one that someone else made
    is `Untrusted`."""
    try:
        dfd = open_dir(path.parent)
    except FileNotFoundError:
        return False
    try:
        st = os.stat(path.name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    finally:
        os.close(dfd)
    if not stat.S_ISREG(st.st_mode):
        raise Untrusted(f"not acting on {path}: it is not a regular file")
    check(st, path)
    return True


def own_names(folder: Path) -> set[str]:
    """The names of the user's own regular files in ``folder`` (a checked one), no others."""
    dfd = open_dir(folder)
    try:
        out = set()
        with os.scandir(dfd) as entries:
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                ok = stat.S_ISREG(st.st_mode) and st.st_uid in trusted_uids()
                if ok and not st.st_mode & OTHERS_WRITE:
                    out.add(entry.name)
        return out
    finally:
        os.close(dfd)


def marked(path: Path) -> bool:
    """`exists`, where someone else's file is no mark (said once on stderr)."""
    try:
        return exists(path)
    except Untrusted as exc:
        refused(exc)
        return False


_SAID: set[str] = set()


def refused(exc: Untrusted) -> None:
    """Say once per process, on stderr, what was not acted on (a rank asks many times)."""
    line = str(exc)
    if line not in _SAID:
        _SAID.add(line)
        print(f"slurmpre: {line}", file=sys.stderr, flush=True)


def create(path: Path, mode: int = 0o600) -> bool:
    """Make the empty mark ``path`` (True), or find the user's own there already (False)."""
    try:
        fd = _open_in(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                      mode)  # fmt: skip
    except FileExistsError:
        if not exists(path):  # gone again in between: make it anew
            return create(path, mode)
        return False
    try:
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    return True


def write(path: Path, data: str | bytes, *, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` atomically: a new name made with ``O_EXCL`` in the
    checked folder, written, fsynced, renamed over ``path``. OSError on failure (the new
    name never outlives it)."""
    raw = data.encode() if isinstance(data, str) else data
    dfd = open_dir(path.parent)
    try:
        tmp = temp_name(path.name)
        write_new(tmp, raw, mode, dir_fd=dfd)
        try:
            os.replace(tmp, path.name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            raise
        with contextlib.suppress(OSError):  # some shared filesystems refuse a folder fsync
            os.fsync(dfd)
    finally:
        os.close(dfd)


def remove(path: Path) -> None:
    """Remove the user's own ``path`` (gone already: nothing to do)."""
    dfd = open_dir(path.parent)
    try:
        os.unlink(path.name, dir_fd=dfd)
    except FileNotFoundError:
        pass
    finally:
        os.close(dfd)


def open_own(path: Path, mode: int = 0o600, *, flags: int = 0) -> int:
    """A descriptor of ``path`` (a lock, the ledger; created if missing), the user's own
    (``flags``: instead of read-write and create)."""
    flags = flags or os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = _open_in(path, flags, mode)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Untrusted(f"not acting on {path}: it is not a regular file")
        check(st, path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def make_own_dir(folder: Path, mode: int) -> None:
    """Create ``folder`` (its parent must exist) with ``mode``, or make sure the one there
    is the user's own real folder with ``mode`` (no one else may write it)."""
    try:
        folder.mkdir(mode=mode)
        created = True
    except FileExistsError:
        created = False
    fd = _real_dir(folder, "using")
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            raise Untrusted(
                f"not using {folder}: it is owned by {owner_name(st.st_uid)}, "
                f"not by {owner_name(os.geteuid())}"
            )
        want = mode | (st.st_mode & stat.S_ISGID)  # a team's setgid folder stays setgid
        if created or stat.S_IMODE(st.st_mode) != want:
            os.fchmod(fd, want)  # the user's own folder, through its descriptor
    finally:
        os.close(fd)
