"""Who may read the files slurmpre creates: their owner alone (the default), or the group too.

slurmpre sets its modes whatever the umask (a umask of 000 would otherwise make them
world-writable, and other nodes trust the choice files); the modes of each access are
`OWNER` and `GROUP` below (docs/security.md, 1 and 2). With the group's, the folders
slurmpre makes above the checkpoint folder are 0750: the group reaches it, and cannot
rename what is in them. A folder that already exists keeps its mode: it is the user's,
except slurmpre's own ``.slurmpre``, set on every start.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from slurmpre import environment
from slurmpre.errors import UsageError


@dataclass(frozen=True)
class Access:
    name: str
    dir_mode: int  # the checkpoint folder and what is written in it
    file_mode: int
    above_mode: int  # folders created above the checkpoint folder
    meta_mode: int  # the job's own .slurmpre
    ledger_mode: int


CONTROL_MODE = 0o600  # what makes a job act: its owner's alone, whatever the access
OWNER = Access("owner", 0o700, 0o600, 0o700, 0o700, 0o600)
# Under group access the checkpoint folders are sticky (1770, as /tmp is): the group adds
# checkpoints, and no one but their owner renames or removes what is in them (a teammate
# cannot move the owner's .slurmpre or checkpoints aside and put their own in place).
GROUP = Access("group", 0o1770, 0o660, 0o750, 0o750, 0o640)
NAMES = {a.name: a for a in (OWNER, GROUP)}


def named(value: object, where: str) -> Access:
    """The access called ``value``; a UsageError naming ``where`` otherwise."""
    found = NAMES.get(value) if isinstance(value, str) else None
    if found is None:
        raise UsageError(f"{where} = {value!r}: must be one of {', '.join(NAMES)}")
    return found


def from_env(env: Mapping[str, str] | None = None) -> Access:
    value = (os.environ if env is None else env).get(environment.FILE_ACCESS) or OWNER.name
    return named(value, environment.FILE_ACCESS)


def make_dir(path: Path, access: Access, *, exist_ok: bool = False) -> bool:
    """Create ``path`` (its parents must exist) with the access's mode; True if created.

    mkdir's mode passes through the umask, which can only take bits away, so
    the folder is never more open than asked, and chmod then restores what a
    strict umask removed (a group's bits).
    """
    return _make(path, access.dir_mode, exist_ok=exist_ok)


def _make(path: Path, mode: int, *, exist_ok: bool = False) -> bool:
    try:
        path.mkdir(mode=mode)
    except FileExistsError:
        if exist_ok and path.is_dir():
            return False
        raise
    # Through a descriptor of what was just made (a link put in its place is not
    # followed), keeping the setgid bit a team's folder passes on to new folders.
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fchmod(fd, mode | (os.fstat(fd).st_mode & stat.S_ISGID))
    finally:
        os.close(fd)
    return True


def make_dirs(path: Path, access: Access) -> bool:
    """``mkdir -p``: the folders it creates get the access's modes whatever the umask (under
    umask 000 a plain ``mkdir -p`` makes them writable by everyone): ``path`` itself
    ``dir_mode``, the ones above it ``above_mode``; folders that exist are left as they are."""
    if path.is_dir():
        return False
    missing = []
    at = path
    while not at.is_dir():
        missing.append(at)
        if at.parent == at:
            break
        at = at.parent
    for folder in reversed(missing):
        _make(folder, access.dir_mode if folder == path else access.above_mode, exist_ok=True)
    return True


def set_mode(path: Path | int, mode: int) -> None:
    """chmod a file or folder this user owns (by path or open descriptor); others, and a
    link (never followed), are left as they are."""
    if not isinstance(path, int):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return
        try:
            set_mode(fd, mode)
        finally:
            os.close(fd)
        return
    with contextlib.suppress(PermissionError):
        if os.fstat(path).st_uid == os.geteuid():
            os.fchmod(path, mode)


def touch(path: Path, access: Access) -> None:
    """Create an empty marker file (or leave an existing one) with the access's mode; never
    through a link."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, access.file_mode)
    try:
        set_mode(fd, access.file_mode)
    finally:
        os.close(fd)
