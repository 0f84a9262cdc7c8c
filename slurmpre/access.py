"""Who may read the files slurmpre creates: their owner alone (the default), or the group too.

Checkpoints, the attempt ledger, its locks, and the choice and notice files
live on a volume every user of the cluster can list. slurmpre creates its
folders 0700 and its files 0600 whatever the umask (a umask of 000 would
otherwise make them world-writable, and other nodes trust the choice files);
with ``file_access = "group"`` they are 0770 and 0660, for a team that shares
checkpoints. A folder that already exists keeps its mode: it is the user's,
except slurmpre's own ``.slurmpre`` folder, which is set on every start.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from slurmpre.errors import UsageError

ENV = "SLURMPRE_FILE_ACCESS"
"""How the wrapper tells the training process (and ``slurmpre.checkpoint``) the access."""


@dataclass(frozen=True)
class Access:
    name: str
    dir_mode: int
    file_mode: int


OWNER = Access("owner", 0o700, 0o600)
GROUP = Access("group", 0o770, 0o660)
NAMES = {a.name: a for a in (OWNER, GROUP)}


def named(value: object, where: str) -> Access:
    """The access called ``value``; a UsageError naming ``where`` otherwise."""
    found = NAMES.get(value) if isinstance(value, str) else None
    if found is None:
        raise UsageError(f"{where} = {value!r}: must be one of {', '.join(NAMES)}")
    return found


def from_env(env: Mapping[str, str] | None = None) -> Access:
    value = (os.environ if env is None else env).get(ENV) or OWNER.name
    return named(value, ENV)


def make_dir(path: Path, access: Access, *, exist_ok: bool = False) -> bool:
    """Create ``path`` (its parents must exist) with the access's mode; True if created.

    mkdir's mode passes through the umask, which can only take bits away, so
    the folder is never more open than asked, and chmod then restores what a
    strict umask removed (a group's bits).
    """
    try:
        path.mkdir(mode=access.dir_mode)
    except FileExistsError:
        if exist_ok and path.is_dir():
            return False
        raise
    path.chmod(access.dir_mode)
    return True


def make_dirs(path: Path, access: Access) -> bool:
    """``mkdir -p``: every folder it creates gets the access's mode, whatever the umask
    (under umask 000 a plain ``mkdir -p`` makes them writable by everyone); folders that
    exist are left as they are."""
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
        make_dir(folder, access, exist_ok=True)
    return True


def set_mode(path: Path | int, mode: int) -> None:
    """chmod a file or folder this user owns (by path or open descriptor); others are left."""
    with contextlib.suppress(PermissionError):
        if isinstance(path, int):
            os.fchmod(path, mode)
        else:
            path.chmod(mode)


def touch(path: Path, access: Access) -> None:
    """Create an empty marker file (or leave an existing one) with the access's mode."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, access.file_mode)
    try:
        set_mode(fd, access.file_mode)
    finally:
        os.close(fd)
