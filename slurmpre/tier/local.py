"""The node-local folder a checkpoint is written to first: where it is, whether it may be
used, and the sealed parts it holds (docs/local-tier.md, 1). A local copy is never what
a resume chooses by itself: it is not durable, a node lost takes it along.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import stat
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurmpre import dollars, environment
from slurmpre.errors import CheckpointError, UsageError
from slurmpre.folder.layout import FolderLayout, file_tag, step_dir_name

PART = ".slurmpre-part"
LOCK = ".lock"  # held by the attempt's wrapper while it lives
# Filesystems that are not the node's own: a local_dir there is refused.
NETWORK = frozenset({"nfs", "nfs4", "lustre", "gpfs", "cifs", "smb3", "beegfs", "glusterfs",
                     "ceph", "panfs", "afs", "9p", "virtiofs", "wekafs"})  # fmt: skip
OFF, AUTO = "off", "auto"
SHM = Path("/dev/shm")
# Below this much free space a node-local folder is not used at all (MB, 10^6 bytes).
MIN_FREE_MB = 64
# Sealed parts kept per node beside the one being flushed: older ones are removed. One:
# with the save in flight and the training's own, a node holds about twice the state.
KEEP = 1
REPLACED = ".replaced-"  # a part sealed again: kept this long for a transfer under way
REPLACED_GRACE = 120.0


class Unusable(CheckpointError):
    """Why a node-local folder is not used: one line; the shared folder is used instead."""


def run_dir(root: Path, folder: Path, node: str, attempt: str) -> Path:
    """One attempt's folder on one node under a node-local ``root``: per user and
    checkpoint folder, per node (a root that several nodes share, by mistake, never mixes
    their parts) and per attempt (two steps of a job on one node never share one)."""
    try:
        inode = folder.stat().st_ino
    except OSError:
        inode = 0
    name = f"{zlib.crc32(str(folder).encode()):08x}-{inode:x}"  # no hashlib: every start pays
    return root / f"slurmpre-{os.geteuid()}" / name / file_tag(node) / file_tag(attempt)


def root_of(setting: str | None, env: Mapping[str, str]) -> Path | None:
    """The node-local root the spec's ``local_dir`` names on this node (None: off)."""
    if setting in (None, "", OFF):
        return None
    if setting == AUTO:
        named = env.get(environment.NODE_LOCAL_DIR, "")
        if named:
            return Path(named)
        if SHM.is_dir():
            return SHM
        raise Unusable("local_dir = 'auto': this node has no $SLURMPRE_NODE_LOCAL_DIR nor /dev/shm")
    try:
        text = "".join(
            env.get(v, "\0") if kind == dollars.VAR else v for kind, v in dollars.parts(setting)
        )
    except UsageError as exc:
        raise Unusable(f"local_dir = {setting!r}: {exc}") from None
    if "\0" in text:
        missing = [n for n in dollars.names(setting) if n not in env]
        raise Unusable(f"local_dir = {setting!r}: ${missing[0]} is not set on this node")
    return Path(text)


@dataclass
class Held:
    """An attempt's node-local folder, and the lock that says its wrapper lives."""

    run: Path
    fd: int

    def release(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


def prepare(
    setting: str | None,
    env: Mapping[str, str],
    folder: Path,
    node: str,
    attempt: str,
    *,
    clear: bool = True,
) -> Held | None:
    """This attempt's node-local folder, made, checked and locked for the wrapper's life
    (what dead attempts left beside it on this node is removed); None when ``local_dir``
    is off. `Unusable` (one line) when it is missing, not writable, full, on a shared or
    network volume, or another user's: the caller saves to the shared folder.
    ``clear`` False leaves the dead attempts' folders to the caller, who first takes
    over what they hold (`salvage.adopt`), then calls `clear_dead`."""
    root = root_of(setting, env)
    if root is None:
        return None
    shown = f"local_dir {str(root)!r}"
    if not root.is_absolute():
        raise Unusable(f"{shown} is not an absolute path")
    if (kind := fs_type(root)) in NETWORK or kind.startswith("fuse"):
        raise Unusable(f"{shown} is on a {kind} filesystem, not on the node")
    try:
        st = root.stat()  # the root an admin names may be a link: judged by where it leads
    except OSError as exc:
        raise Unusable(f"{shown} cannot be used: {exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise Unusable(f"{shown} is not a folder")
    with contextlib.suppress(OSError):
        if st.st_dev == folder.stat().st_dev:
            raise Unusable(f"{shown} is on the volume of the checkpoint folder {str(folder)!r}")
    if not os.access(root, os.W_OK | os.X_OK):
        raise Unusable(f"{shown} is not writable")
    free = free_bytes(root)
    if free < MIN_FREE_MB * 10**6:
        raise Unusable(f"{shown} is full ({free // 10**6} MB free)")
    run = run_dir(root, folder, node, attempt)
    for path in reversed([run, *run.parents][:4]):
        _own_dir(path)
    fd = os.open(run / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    if clear:
        clear_dead(run.parent, keep=run.name)
    return Held(run, fd)


def clear_dead(node_dir: Path, keep: str) -> list[str]:
    """Remove the folders of this node's other attempts whose wrapper is gone (their lock
    is free): what a killed job left in RAM. A live one (a step beside this one) stays."""
    removed = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(node_dir):
            if entry.name == keep or not entry.is_dir(follow_symlinks=False):
                continue
            try:
                fd = os.open(Path(entry.path) / LOCK, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                fd = None
            try:
                if fd is not None:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # its wrapper holds it: alive
            finally:
                if fd is not None:
                    os.close(fd)
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.name)
    return removed


def fs_type(path: Path) -> str:
    """The type of the filesystem ``path`` lies on, from /proc/self/mounts ("" unknown)."""
    try:
        real = os.path.realpath(path)
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return ""
    best, kind = "", ""
    for fields in map(str.split, lines):
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, fields[2]
    return kind


def _own_dir(path: Path) -> None:
    """``path`` made 0700, or found a folder (not a link) of this user's, made 0700 again:
    another user may have made it first in a root everyone writes."""
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        raise Unusable(f"{str(path)!r} is not a folder of this user's: not used") from None
    try:
        if os.fstat(fd).st_uid != os.geteuid():
            raise Unusable(f"{str(path)!r} is not a folder of this user's: not used")
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)


def free_bytes(path: Path) -> int:
    try:
        vfs = os.statvfs(path)
    except OSError:
        return 0
    return vfs.f_bavail * vfs.f_frsize


def room_for_one_more(run: Path) -> str | None:
    """None when ``run`` (this user's, not a link) has room for one more checkpoint as
    big as its newest part (and MIN_FREE_MB); else why not, in words."""
    try:
        st = run.lstat()
    except OSError as exc:
        return f"the node-local folder {str(run)!r} is gone ({exc.strerror})"
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        return f"{str(run)!r} is not a folder of this user's"
    held = parts(run)
    need = (held[-1].size * 11 // 10 if held else 0) + MIN_FREE_MB * 10**6
    free = free_bytes(run)
    if free < need:
        last = f", the last checkpoint took {held[-1].size // 10**6} MB" if held else ""
        return f"the node-local folder {str(run)!r} has {free // 10**6} MB free{last}"
    return None


@dataclass(frozen=True)
class Part:
    """One node's sealed part of a checkpoint."""

    step: int
    path: Path
    files: dict[str, int]  # relative path -> size
    meta: dict[str, Any]  # what the durable commit records (`seal`)

    @property
    def size(self) -> int:
        return sum(self.files.values())

    @property
    def whole(self) -> bool:
        """Every node's files: a pulled copy, or the only node's part."""
        return bool(self.meta.get("whole")) or self.meta.get("nodes") == 1


def incoming(run: Path, step: int, tag: str) -> Path:
    """Where the ranks of this node write a checkpoint before it is sealed."""
    return FolderLayout(run).incoming(step, tag)


def saving(run: Path) -> bool:
    """Whether the ranks of this node are writing a checkpoint into ``run`` now (the
    training waits for it: the flush gives it the node's memory and disks meanwhile)."""
    try:
        with os.scandir(run) as entries:
            return any(e.name.startswith(".incoming-step-") for e in entries)
    except OSError:
        return False


def seal(written: Path, run: Path, step: int, meta: Mapping[str, Any]) -> Path:
    """Seal what this node's ranks wrote into ``written`` as its part of ``step``: the
    list of its files, then one rename. A part of that step sealed before is replaced:
    the newest save of a step is the run's (one trained again after a resume from an
    older checkpoint differs). No fsync: a local copy is not durable, the flush is."""
    files = _files(written)
    record = {"step": step, "files": files, **meta}
    (written / PART).write_text(json.dumps(record, sort_keys=True) + "\n")
    final = run / step_dir_name(step)
    if final.exists():
        # Set aside, removed later (`prune`): a server may be sending its files right now.
        final.rename(run / f"{REPLACED}{time.time_ns()}-{os.getpid()}-{final.name}")
    written.rename(final)
    return final


def _files(folder: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for root, dirs, names in os.walk(folder):
        dirs.sort()
        for name in sorted(names):
            full = Path(root) / name
            rel = full.relative_to(folder).as_posix()
            if rel != PART and not full.is_symlink():
                out[rel] = full.stat().st_size
    return out


def parts(run: Path, prefix: str = "step-", *, named: bool = True) -> list[Part]:
    """The sealed parts in ``run`` (in the folders whose names begin with ``prefix``),
    oldest first; a folder whose files are not the ones its seal lists is no part."""
    found = []
    with contextlib.suppress(OSError), os.scandir(run) as entries:
        for entry in entries:
            if entry.name.startswith(prefix) and entry.is_dir(follow_symlinks=False):
                part = read_part(Path(entry.path), named=named)
                if part is not None:
                    found.append(part)
    return sorted(found, key=lambda p: p.step)


def read_part(path: Path, *, named: bool = True) -> Part | None:
    """The part sealed in ``path`` (None: none, or one whose files differ from its seal);
    ``named``: its folder bears its step's name (not so where a pull puts it first)."""
    try:
        fd = os.open(path / PART, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd) as f:
            data = json.load(f)
        files = {str(k): int(v) for k, v in data.pop("files").items()}
        step = int(data.pop("step"))
        for rel, size in files.items():
            parts_of = rel.split("/")
            if rel.startswith("/") or any(p in ("", ".", "..") for p in parts_of):
                return None  # a name that leaves the folder: no part of ours
            st = (path / rel).lstat()
            if not stat.S_ISREG(st.st_mode) or st.st_size != size:
                return None
    except (OSError, ValueError, KeyError, AttributeError, TypeError):
        return None
    if named and path.name != step_dir_name(step):
        return None
    return Part(step, path, files, data)


def node_of(text: str) -> dict[str, int]:
    """``{"node": I, "nodes": N}`` from ``"I/N"`` (the wrapper's `LOCAL_NODE`), else {}."""
    node, _, nodes = text.partition("/")
    if node.isdigit() and nodes.isdigit() and int(node) < int(nodes):
        return {"node": int(node), "nodes": int(nodes)}
    return {}


def nearest(run: str | None, resume_from: str | None) -> str | None:
    """``resume_from`` (a ``step-N`` in the checkpoint folder), or this attempt's whole
    copy of it in ``run`` (every node's part, as a pull leaves it; one node's own part
    only in a one-node job): read from RAM, and there before the flush has put it in the
    folder. One node's part of a bigger job is never taken for the checkpoint."""
    if not run or not resume_from:
        return resume_from
    copy = Path(run) / Path(resume_from).name
    part = read_part(copy) if copy.name.startswith("step-") else None
    return str(copy) if part is not None and part.whole else resume_from


def prune(run: Path, keep: int = KEEP, busy: frozenset[int] = frozenset()) -> list[int]:
    """Remove all but the newest ``keep`` parts, never one of ``busy`` (being flushed or
    kept whole on the neighbour), and parts replaced over REPLACED_GRACE seconds ago.
    Returns the steps removed."""
    removed = []
    with contextlib.suppress(OSError), os.scandir(run) as entries:
        for entry in entries:
            stamp = entry.name[len(REPLACED) :].split("-", 1)[0]
            if entry.name.startswith(REPLACED) and stamp.isdigit() \
                    and time.time_ns() - int(stamp) > REPLACED_GRACE * 1e9:  # fmt: skip
                shutil.rmtree(entry.path, ignore_errors=True)
    held = parts(run)
    for part in held[: max(0, len(held) - keep)]:
        if part.step not in busy:
            shutil.rmtree(part.path, ignore_errors=True)
            removed.append(part.step)
    return removed
