"""The wrapper's guard: when the wrapper is gone, make sure its training tree is gone too.

Where Slurm tracks processes by process group (proctrack/pgid), training processes in
sessions of their own (torchrun puts every worker in one) outlive the killed wrapper,
keep the step's output open, and Slurm drains the node with "Kill task failed". The
wrapper sends this process, every couple of seconds, its training processes; when the
wrapper ends, even by SIGKILL, stdin closes and the guard ends what of that list still
runs (SIGTERM, then SIGKILL after a short grace).
"""

from __future__ import annotations

import signal
import sys

from slurmpre import procs

GRACE = 2.0


def read_snapshots(stream: object) -> dict[int, int]:
    """Lines ``pid starttime``; an empty line ends a snapshot. Returns the last complete one."""
    latest: dict[int, int] = {}
    current: dict[int, int] = {}
    for line in stream:  # type: ignore[attr-defined]
        line = line.strip()
        if not line:
            latest, current = current, {}
            continue
        pid, _, start = line.partition(" ")
        if pid.isdigit() and start.isdigit():
            current[int(pid)] = int(start)
    return latest or current


def end_all(snapshot: dict[int, int]) -> list[int]:
    """SIGTERM the listed processes that are still the same ones, then SIGKILL the rest."""
    mine = [pid for pid, start in snapshot.items() if procs.start_time(pid) == start]
    alive = [pid for pid in mine if procs.alive(pid)]
    procs.signal_all(alive, signal.SIGTERM)
    left = procs.wait_gone(alive, GRACE)
    procs.signal_all(left, signal.SIGKILL)
    return alive


def main(stream: object = None) -> int:
    """Read snapshots until the wrapper's end closes the stream (stdin), then end the last."""
    end_all(read_snapshots(sys.stdin if stream is None else stream))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
