"""Which Slurm commands reach the sandbox that is up: what slurmpre's own commands add to
their environment as they start (a Debian root's shims first on PATH, the sandbox's
SLURM_CONF), read from what the sandbox left, without the rest of the package; see
docs/sandbox.md ("slurmpre's commands reach the sandbox that is up").

What is read here decides which program runs as ``sbatch``: the state folder,
``sandbox.json``, the shims' folder and every shim are opened without following a link
and must be root's and writable by no group or other (as `slurmpre.folder.trust` opens a
job's files); anything else is a `SandboxError` naming the file, and nothing changes.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from slurmpre import environment
from slurmpre.errors import SandboxError
from slurmpre.sandbox.instance import MAX, STATE_FILE, Instance, from_env, state_dir_of

if TYPE_CHECKING:
    from slurmpre.sandbox.config import State

ROOT_ONLY = frozenset({0})  # whose files decide which Slurm runs
STATE_LIMIT = 1 << 16  # bytes: a sandbox.json is under 4 KiB
OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def needed(env: Mapping[str, str], owners: frozenset[int] | None = None) -> dict[str, str]:
    """What to set in ``env`` so that the Slurm commands it finds reach the sandbox that is
    up ({}: nothing to change). SandboxError when what the sandbox left is not ``owners``'
    (root's) alone; UsageError when ``$SLURMPRE_SANDBOX`` is not a sandbox's number."""
    owners = ROOT_ONLY if owners is None else owners
    from_env(env)  # a bad $SLURMPRE_SANDBOX is one line, as for `slurmpre sandbox`
    raw = _read_state(state_dir_of(env), owners)
    if raw is None:
        return {}
    state = _state(raw)
    if state is None or not _controller_runs(state.slurmctld):
        return {}
    conf = str(Instance(state.instance).conf)
    given_conf = env.get("SLURM_CONF", "")
    named = bool(environment.text(env, environment.SANDBOX).strip())
    named = named or bool(environment.text(env, environment.SANDBOX_DIR))
    if not named and given_conf not in ("", conf):
        return {}  # the user points Slurm at another cluster
    out = {}
    if state.root is not None and state.suite is not None:
        from slurmpre.sandbox.roots import Root, slurm_path

        root = Root(state.suite, Path(state.root))
        path = env.get("PATH", "")
        if slurm_dir(path) != root.shims:
            _check_shims(root.shims, owners)
            out["PATH"] = slurm_path(path, root)
    # Slurm's own default is sandbox 0's (/etc/slurm/slurm.conf), on the host or in a root.
    if given_conf != conf and (given_conf or state.instance != 0):
        out["SLURM_CONF"] = conf
    return out


def slurm_dir(path: str) -> Path | None:
    """The folder of the first ``sbatch`` on ``path`` (a PATH): whose Slurm it runs. A
    folder this user may not search, or a name too long, is passed over."""
    from slurmpre.reading import reachable

    for part in path.split(os.pathsep) if path else []:
        if part and reachable(Path(part) / "sbatch"):
            return Path(part)
    return None


def _read_state(state_dir: Path, owners: frozenset[int]) -> bytes | None:
    """``sandbox.json`` of ``state_dir``, or None when there is none (no sandbox up)."""
    try:
        dfd = _open(state_dir, _DIR_FLAGS)
    except FileNotFoundError:
        return None
    try:
        _check(os.fstat(dfd), state_dir, owners)
        try:
            fd = _open(state_dir / STATE_FILE, _READ_FLAGS, dfd)
        except FileNotFoundError:
            return None
    finally:
        os.close(dfd)
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        _check(st, state_dir / STATE_FILE, owners, regular=True)
        if st.st_size > STATE_LIMIT:
            raise SandboxError(f"not using {state_dir / STATE_FILE}: {st.st_size} bytes")
        return fh.read(STATE_LIMIT)


def _check_shims(shims: Path, owners: frozenset[int]) -> None:
    """The shims' folder and everything in it are ``owners``' alone."""
    try:
        dfd = _open(shims, _DIR_FLAGS)
    except FileNotFoundError:
        raise SandboxError(f"not using {shims}: it is not there") from None
    try:
        _check(os.fstat(dfd), shims, owners)
        with os.scandir(dfd) as entries:
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError as exc:
                    raise SandboxError(f"not using {shims / entry.name}: {exc.strerror}") from None
                _check(st, shims / entry.name, owners, regular=True)
    finally:
        os.close(dfd)


def _open(path: Path, flags: int, dir_fd: int | None = None) -> int:
    """``path`` (its name, in ``dir_fd``) opened without following a link; FileNotFoundError
    when it is missing, SandboxError when it cannot be used."""
    try:
        return os.open(path if dir_fd is None else path.name, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            what = "a link" if exc.errno == errno.ELOOP else "a link or not a folder"
            raise SandboxError(f"not using {path}: it is {what}") from None
        raise SandboxError(f"not using {path}: {exc.strerror}") from None


def _check(st: os.stat_result, path: Path, owners: frozenset[int], regular: bool = False) -> None:
    if regular and not stat.S_ISREG(st.st_mode):
        raise SandboxError(f"not using {path}: it is not a regular file")
    if st.st_uid not in owners:
        from slurmpre.folder.trust import owner_name

        whose = " or ".join(owner_name(uid) for uid in sorted(owners))
        raise SandboxError(f"not using {path}: it is owned by {owner_name(st.st_uid)}, not {whose}")
    if st.st_mode & OTHERS_WRITE:
        who = "its group" if st.st_mode & stat.S_IWGRP else "everyone"
        raise SandboxError(
            f"not using {path}: {who} may write it (mode {stat.S_IMODE(st.st_mode):o})"
        )


def _state(raw: bytes) -> State | None:
    """The recorded `State`, or None when it is not one (a half-written or older file)."""
    import json

    from slurmpre.sandbox.config import State
    from slurmpre.sandbox.roots import SUITES

    try:
        data = json.loads(raw)
        state = State(**data)
    except (ValueError, TypeError):
        return None
    ok = isinstance(state.instance, int) and 0 <= state.instance <= MAX
    if state.root is not None or state.suite is not None:
        ok = ok and isinstance(state.root, str) and state.root.startswith("/")
        ok = ok and state.suite in SUITES.values()
    return state if ok else None


def _controller_runs(pid: object) -> bool:
    """The sandbox's slurmctld still runs (its pid not yet reused by another program)."""
    from slurmpre import procs

    return isinstance(pid, int) and pid > 0 and procs.is_process_of(pid, "slurmctld")
