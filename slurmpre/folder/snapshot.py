"""A code snapshot's identity: what every attempt runs, named by the first 16 hex digits
of `digest` (every path, mode and content, a link's target never followed, in order),
and checked again as each attempt starts (`verify`; docs/security.md, 4).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from slurmpre.errors import JobEnvironmentError
from slurmpre.folder import trust

if TYPE_CHECKING:
    import hashlib

NAME_LENGTH = 16
CHUNK = 1 << 20
DIR_MODE = 0o700


def file_mode(mode: int) -> int:
    """A copied file's mode: the owner's bits of the original, readable, nobody else's."""
    return stat.S_IMODE(mode) & 0o700 | 0o400


def digest(root: Path, *, check: bool = False) -> str:
    """The sha256 of every entry below ``root``, in order of path; with ``check``, each one
    must be the user's own and writable by no one else (`trust.Untrusted` otherwise)."""
    import hashlib  # here: loading OpenSSL is 2 ms of every wrapper's start-up otherwise

    h = hashlib.sha256()
    top = os.lstat(root)
    if check:
        trust.check(top, root)
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        here = Path(folder)
        if check and here != root:
            trust.check(os.lstat(here), here)
        for name in sorted(files + [d for d in dirs if (here / d).is_symlink()]):
            path = here / name
            st = os.lstat(path)
            if check and stat.S_ISLNK(st.st_mode):  # a link's mode is always 777: whose it is
                trust.check(os.lstat(path.parent), path.parent)
                if st.st_uid not in trust.trusted_uids():
                    trust.check(st, path)
            elif check:
                trust.check(st, path)
            rel = path.relative_to(root).as_posix()
            h.update(f"{rel}\0{stat.S_IMODE(st.st_mode):o}\0".encode())
            if stat.S_ISLNK(st.st_mode):
                h.update(b"link\0" + str(path.readlink()).encode())
            elif stat.S_ISREG(st.st_mode):
                _content(path, h)
            else:
                raise trust.Untrusted(f"not running code from {path}: not a file or a link")
            h.update(b"\0")
    return h.hexdigest()


def _content(path: Path, h: hashlib._Hash) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as fh:
        while chunk := fh.read(CHUNK):
            h.update(chunk)


def name_of(root: Path) -> str:
    return digest(root)[:NAME_LENGTH]


def verify(root: Path) -> None:
    """Refuse to start from a snapshot that someone else could have changed, or that
    changed since it was copied (a JobEnvironmentError naming it)."""
    try:
        found = digest(root, check=True)[:NAME_LENGTH]
    except trust.Untrusted as exc:
        raise JobEnvironmentError(f"the code snapshot is not the user's alone: {exc}") from None
    except OSError as exc:
        raise JobEnvironmentError(f"cannot read the code snapshot {root}: {exc}") from None
    if found != root.name:
        raise JobEnvironmentError(
            f"the code snapshot {root} changed since it was submitted (its files now hash "
            f"to {found}): not running it; submit again to take a new snapshot"
        )
