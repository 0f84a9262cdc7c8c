"""Memory per node of the sandbox's jobs, for bench/big_state.py: the RSS of a node's job
processes (anonymous and file pages; tmpfs pages are left to the folder's count) and the
bytes in its node-local folder (the sandbox puts it in /dev/shm, RAM), sampled every
0.5 s. All the sandbox's nodes live on this host: a node's job processes are the ones
below its slurmstepds, found by their sockets in the node's spool folder."""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from slurmpre import procs
from slurmpre.sandbox.cluster import Sandbox

EVERY = 0.5  # seconds between samples
STEPDS_EVERY = 2.0  # seconds between looks for a node's slurmstepds (a scan of every fd)


def rss_bytes(pid: int) -> int:
    """RssAnon + RssFile of ``pid`` (0 when it is gone)."""
    total = 0
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(("RssAnon:", "RssFile:")):
                total += int(line.split()[1]) * 1024
    return total


def folder_bytes(folder: Path) -> int:
    total = 0
    for root, _, names in os.walk(folder):
        for name in names:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def clear_local(box: Sandbox) -> int:
    """Empty every node's local folder; the bytes it held."""
    cfg, total = box.config(), 0
    for node in cfg.nodes:
        folder = cfg.local_dir(node.name)
        total += folder_bytes(folder)
        with contextlib.suppress(OSError):
            for entry in folder.iterdir():
                shutil.rmtree(entry, ignore_errors=True)
    return total


class Memory(threading.Thread):
    """Samples every node until ``stop``; ``peaks`` says each node's peak."""

    def __init__(self, box: Sandbox) -> None:
        super().__init__(daemon=True, name="memory")
        cfg = box.config()
        self.spool = {n.name: cfg.spool_dir(n.name) for n in cfg.nodes}
        self.local = {n.name: cfg.local_dir(n.name) for n in cfg.nodes}
        self.samples: dict[str, list[tuple[int, int]]] = {n: [] for n in self.spool}
        self.load_max = 0.0  # the 1-minute load average, the highest seen
        self._done = threading.Event()

    def run(self) -> None:
        stepds: dict[str, set[int]] = {}
        looked = 0.0
        while not self._done.is_set():
            if time.monotonic() - looked > STEPDS_EVERY:
                stepds = {n: procs.holders_of_sockets_under(s) for n, s in self.spool.items()}
                looked = time.monotonic()
            self.load_max = max(self.load_max, os.getloadavg()[0])
            for node, held in stepds.items():
                rss = sum(rss_bytes(p) for p in procs.descendants(held)) if held else 0
                local = folder_bytes(self.local[node])
                if rss or local:
                    self.samples[node].append((rss, local))
            self._done.wait(EVERY)

    def stop(self) -> None:
        self._done.set()
        self.join(30)

    def peaks(self, state_mb: int) -> dict[str, dict[str, Any]]:
        """Per node that ran the job: the peak of RSS + local bytes (MB), its parts, the
        training's own RSS (the median: it trains most of the time) and the peak beyond
        it as a multiple of the state."""
        out = {}
        for node, samples in self.samples.items():
            if not samples:
                continue
            rss, local = max(samples, key=sum)
            own = statistics.median(r for r, _ in samples if r) if any(r for r, _ in samples) else 0
            out[node] = {
                "peak_mb": (rss + local) / 1e6,
                "rss_mb": rss / 1e6,
                "local_mb": local / 1e6,
                "own_mb": own / 1e6,
                "beside_x": (rss + local - own) / 1e6 / state_mb,
                "samples": len(samples),
            }
        return out
