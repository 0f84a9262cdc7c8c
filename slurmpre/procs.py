"""Processes found by pid, by ancestry and by what they hold, never by a broad name.

Used by the sandbox (its daemons and their jobs) and by the in-job wrapper (its
training tree); reads /proc only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path

PROC = Path("/proc")


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # comm may hold spaces and parentheses: split after the last ')'.
    return raw[raw.rfind(")") + 2 :].split()


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for a parent that never reaps it."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks: with the pid, it names one process for good."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields is not None and len(fields) > 19 else None


def cmdline(pid: int) -> list[str]:
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return []
    return [p.decode(errors="replace") for p in raw.split(b"\0") if p]


def pids() -> list[int]:
    return [int(e.name) for e in PROC.iterdir() if e.name.isdigit()]


def root_of(pid: int) -> str | None:
    """The root folder the process sees (``/``, or a chroot's), or None when unknown."""
    try:
        return str((PROC / str(pid) / "root").readlink())
    except OSError:
        return None


def is_process_of(pid: int, executable: str) -> bool:
    """``pid`` is alive and runs ``executable`` (guards against a reused pid)."""
    if not alive(pid):
        return False
    argv = cmdline(pid)
    return bool(argv) and Path(argv[0]).name == Path(executable).name


def _parents() -> dict[int, int]:
    return {pid: int(fields[1]) for pid in pids() if (fields := _stat_fields(pid)) is not None}


def children(pid: int) -> set[int]:
    return {child for child, parent in _parents().items() if parent == pid}


def descendants(roots: Iterable[int]) -> set[int]:
    """Every process below ``roots`` (not including them)."""
    children: dict[int, list[int]] = {}
    for pid, ppid in _parents().items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    todo = list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _socket_inodes_under(folder: Path) -> set[str]:
    prefix = str(folder).rstrip("/") + "/"
    inodes: set[str] = set()
    try:
        lines = (PROC / "net" / "unix").read_text().splitlines()[1:]
    except OSError:
        return inodes
    for line in lines:
        parts = line.split()
        if len(parts) >= 8 and parts[7].startswith(prefix):
            inodes.add(parts[6])
    return inodes


def holders_of_sockets_under(folder: Path) -> set[int]:
    """Processes that hold a unix socket bound under ``folder``.

    Each slurmstepd listens on ``<SlurmdSpoolDir>/<node>_<job>.<step>``, which is
    how a node's job processes are told from another node's on this one host.
    """
    inodes = _socket_inodes_under(folder)
    if not inodes:
        return set()
    wanted = {f"socket:[{i}]" for i in inodes}
    pids = set()
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in (entry / "fd").iterdir():
                with contextlib.suppress(OSError):
                    if str(fd.readlink()) in wanted:
                        pids.add(int(entry.name))
                        break
    return pids


def signal_all(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def wait_gone(pids: Iterable[int], timeout: float) -> set[int]:
    """Wait until none of ``pids`` is alive; return those still alive at the deadline."""
    pending = set(pids)
    deadline = time.monotonic() + timeout
    while True:
        pending = {p for p in pending if alive(p)}
        if not pending or time.monotonic() >= deadline:
            return pending
        time.sleep(0.05)


def stop(pids: Iterable[int], *, grace: float = 10.0) -> None:
    """SIGTERM, wait up to ``grace``, then SIGKILL whatever is left."""
    pids = {p for p in pids if alive(p)}
    signal_all(pids, signal.SIGTERM)
    kill_now(wait_gone(pids, grace))


def kill_now(pids: Iterable[int]) -> None:
    """SIGKILL at once, as when a machine vanishes."""
    pids = {p for p in pids if alive(p)}
    signal_all(pids, signal.SIGKILL)
    wait_gone(pids, 5.0)
