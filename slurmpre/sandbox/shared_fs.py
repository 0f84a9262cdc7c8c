"""The sandbox's shared filesystem of capped bandwidth (`up --shared-dir DIR --shared-mbps N`),
served by `slowfs`; see docs/sandbox.md ("A shared filesystem of capped bandwidth").

A Debian root's /tmp and /home are binds made before DIR is mounted and blind to it, so
DIR is also bound into the root at its own path (`mount`). Every mount and the server's
command line carry the sandbox's name (``slurmpre-sandbox7``): `take_down` finds them by
it, recorded or not, a stale mount whose server died included.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import stat
import sys
import time
from ctypes.util import find_library
from pathlib import Path
from typing import Any

from slurmpre import procs
from slurmpre.cmd import run
from slurmpre.errors import SandboxError, UsageError
from slurmpre.sandbox.asked import SharedDir
from slurmpre.sandbox.daemons import spawn_detached
from slurmpre.sandbox.host import apt_install
from slurmpre.sandbox.instance import STATE_ROOT, Instance
from slurmpre.sandbox.roots import ROOTS_DIR, Root, mounts

LOG = logging.getLogger(__name__)

MODULE = "slurmpre.sandbox.slowfs"
PACKAGES = ("fuse3", "libfuse3-3")  # fusermount3, libfuse3.so.3
DEV_FUSE = Path("/dev/fuse")


def fs_name(instance: Instance) -> str:
    """The source every mount of this sandbox's filesystem shows in /proc/mounts."""
    return f"slurmpre-{instance.cluster_name}"


def checked(
    given: str | None, mbps: float | None, state_dir: Path, instance: Instance
) -> SharedDir | None:
    """``--shared-dir`` and ``--shared-mbps``, checked before anything starts: a UsageError
    (one line, exit 2) for a DIR that is ``/``, holds the sandbox's state or a root, or
    lies inside them, or is not an empty folder (unless it is this sandbox's mount)."""
    if given is None:
        if mbps is not None:
            raise UsageError("--shared-mbps caps the filesystem of --shared-dir: give both")
        return None
    if mbps is not None and not 0 < mbps < float("inf"):
        raise UsageError(
            f"--shared-mbps must be above 0 (MB/s: 10**6 bytes a second), got {mbps:g}"
        )
    if not given.strip():
        raise UsageError("--shared-dir: give a folder")
    path = Path(os.path.realpath(given))
    if path == Path("/"):
        raise UsageError("--shared-dir /: give a folder of its own")
    for keep, what in (
        (state_dir, "the sandbox's state"),
        (STATE_ROOT, "the sandboxes' state"),
        (ROOTS_DIR, "the Debian roots"),
    ):
        inside = Path(os.path.realpath(keep))
        if path.is_relative_to(inside) or inside.is_relative_to(path):
            raise UsageError(f"--shared-dir {given}: it would hold or lie inside {what} ({keep})")
    if str(path) in points(instance):  # its own mount: the sandbox up, or a stale one
        return SharedDir(path, mbps)
    try:
        if path.exists():
            if not path.is_dir():
                raise UsageError(f"--shared-dir {given}: not a folder")
            if any(path.iterdir()):
                raise UsageError(f"--shared-dir {given}: not empty (give an empty or new folder)")
            if path.is_mount():
                raise UsageError(f"--shared-dir {given}: a mount point already")
    except OSError as exc:
        raise UsageError(f"--shared-dir {given}: {exc.strerror or exc}") from None
    return SharedDir(path, mbps)


def missing() -> str | None:
    """Why this host cannot serve a shared dir (None: it can; libfuse comes with `up`)."""
    if not DEV_FUSE.exists():
        return "this host has no /dev/fuse"
    if importlib.util.find_spec("mfusepy") is None:
        return f"the Python package mfusepy is not in {sys.prefix}"
    return None


def ensure_fuse() -> None:
    """FUSE's device, libfuse 3 (installed with apt-get when missing) and mfusepy."""
    if not DEV_FUSE.exists():
        raise SandboxError(
            "--shared-dir needs FUSE and this host has no /dev/fuse (load the fuse module, "
            "or give the container the device)"
        )
    missing = [] if find_library("fuse3") else ["libfuse3.so.3"]
    missing += [] if shutil.which("fusermount3") else ["fusermount3"]
    if missing:
        apt_install(PACKAGES, "FUSE 3", missing)
    if importlib.util.find_spec("mfusepy") is None:
        raise SandboxError(
            f"--shared-dir needs the Python package mfusepy in {sys.prefix}: "
            f"{sys.executable} -m pip install mfusepy"
        )


def points(instance: Instance) -> list[str]:
    """Where this sandbox's filesystem is mounted (host and roots; twice if stacked)."""
    name = fs_name(instance)
    return [point for source, point in mounts() if source == name]


def servers(instance: Instance) -> set[int]:
    """The processes that serve this sandbox's filesystem, found by their command line."""
    name = fs_name(instance)
    found = set()
    for pid in procs.pids():
        argv = procs.cmdline(pid)
        if MODULE in argv and "--name" in argv[:-1] and argv[argv.index("--name") + 1] == name:
            found.add(pid)
    return found


def alive(record: dict[str, Any] | None, instance: Instance) -> bool:
    """No shared filesystem was asked for, or it is served and mounted at its folder."""
    if record is None:
        return True
    pid = record.get("pid")
    return pid in servers(instance) and record.get("dir") in points(instance)


def mount(
    shared: SharedDir, instance: Instance, root: Root | None, log: Path, timeout: float = 15.0
) -> int:
    """Serve DIR (made if missing) from its backing folder, and bind it into ``root`` at
    its own path: the pid of the server."""
    backing = shared.backing
    try:
        shared.dir.mkdir(parents=True, exist_ok=True)
        st = shared.dir.stat()
        if not backing.exists() and not backing.is_symlink():
            # New: it takes DIR's owner and mode, which the mount shows.
            backing.mkdir()
            os.chown(backing, st.st_uid, st.st_gid)
            backing.chmod(stat.S_IMODE(st.st_mode))
        held = backing.lstat()
    except OSError as exc:
        raise SandboxError(
            f"--shared-dir {shared.dir}: {exc.strerror or exc} ({exc.filename})"
        ) from None
    # Root acts on what is in it: only a folder of root's or DIR's owner, never a link.
    if not stat.S_ISDIR(held.st_mode) or held.st_uid not in (0, st.st_uid):
        raise SandboxError(
            f"--shared-dir {shared.dir}: its backing folder {backing} is not a folder of "
            "root's or of the folder's owner (a link, or another user's): move it aside"
        )
    name = fs_name(instance)
    argv = [sys.executable, "-m", MODULE, str(backing), str(shared.dir), "--name", name]
    if shared.mbps is not None:
        argv += ["--mbps", str(shared.mbps)]
    pid = spawn_detached(argv, log).pid
    deadline = time.monotonic() + timeout
    while str(shared.dir) not in points(instance):
        if not procs.alive(pid) or time.monotonic() > deadline:
            procs.stop([pid], grace=2.0)
            tail = log.read_text(errors="replace").strip().splitlines()[-1:]
            raise SandboxError(
                f"the shared filesystem did not mount at {shared.dir}: "
                + (tail[0] if tail else f"no answer within {timeout:g} s")
            )
        time.sleep(0.05)
    if root is not None:
        inside = root.path / shared.dir.relative_to("/")
        if str(inside) not in points(instance):  # not there by propagation already
            try:
                inside.mkdir(parents=True, exist_ok=True)
                run(
                    ["mount", "--bind", str(shared.dir), str(inside)],
                    timeout=30,
                    error=SandboxError,
                )
            except (OSError, SandboxError) as exc:
                take_down(instance)
                raise SandboxError(f"cannot bind {shared.dir} into {root.path}: {exc}") from None
    return pid


def take_down(instance: Instance) -> None:
    """Unmount every mount of this sandbox's filesystem (a root's bind, then the host's;
    a stale one whose server died too), then stop its server if it still runs."""
    for point in sorted(points(instance), key=len, reverse=True):
        run(["umount", "-l", point], timeout=30, check=False)
    procs.stop(servers(instance), grace=5.0)
