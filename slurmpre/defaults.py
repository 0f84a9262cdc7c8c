"""Every default of the preemption path, defined once.

They travel spec -> template -> the wrapper's arguments -> `WatchConfig`; the
wrapper's own defaults (for a hand-run ``slurmpre run``) are these too.
"""

from __future__ import annotations

import math

POLL_INTERVAL = 5.0  # seconds between the watcher's Slurm queries
PREEMPT_WINDOW = 300  # seconds from drain to node removal: the provider's five minutes
SAFETY_MARGIN = 30  # requeue anyway this long before the window closes
WARN_BEFORE_END = 300  # seconds: the time-limit warning (--signal) before the limit
AGREE_TIMEOUT = 300.0  # seconds the other nodes wait for node 0's checkpoint choice
CHECKPOINT_TIMEOUT = 1800.0  # seconds a rank waits for the others to finish a checkpoint
ON_DEMAND_PRICE = 2.0  # $ per GPU-hour on demand, for cost figures (`status`, `plan`)
PREEMPTIBLE_DISCOUNT = 0.5  # the preemptible nodes' discount: half price
# The drill's price of a node-hour on demand (its nodes have no GPU; a round figure
# that makes its costs readable, never used for a real job's).
DRILL_NODE_HOUR = 10.0
# How a job continues after a notice that ends its allocation: "requeue" (scontrol
# requeue: Slurm starts it again after cred_expire + 1, 121 s on stock timings) or
# "successor" (a new job with the same script takes over: no such floor).
RESTARTS = ("requeue", "successor")
RESTART = "successor"
GROW_SETTLE = 10.0  # seconds a preemptible node stays idle before a job grows onto it
# A run stops restarting after this many restarts (a preemptible node a day is ~60 in a
# two-month run), or after this many attempts in a row that committed no checkpoint.
MAX_RESTARTS = 100
MAX_STALLED_RESTARTS = 3
# snapshot = "git": the most the copied code may come to, in MB (10^6 bytes).
SNAPSHOT_MAX_MB = 200
SNAPSHOTS = ("none", "git")

# The range of every number a spec (and the wrapper's command line) accepts: finite,
# and inside what Slurm itself takes (--signal's time is at most 65535 s).
RANGES: dict[str, tuple[float, float]] = {
    "nodes": (1, 100_000),
    "gpus_per_node": (0, 1_024),
    "gpus": (0, 1_048_576),
    "cpus_per_task": (1, 65_536),
    "nproc_per_node": (1, 1_024),
    "warn_before_end": (0, 65_535),
    "preempt_window": (1, 86_400),
    "safety_margin": (0, 86_400),
    "poll_interval": (0.1, 3_600),
    "agree_timeout": (1, 86_400),
    "max_restarts": (0, 100_000),
    "max_stalled_restarts": (0, 1_000),
    "snapshot_max_mb": (1, 100_000),
    "total_steps": (1, 10**15),
    "fallback_after": (1, 100_000),
    "max_preemptions": (0, 100_000),
    "max_wait": (1, 366 * 86_400),
    "max_cost": (0.01, 1e12),
    "grow": (1, 100_000),  # the wrapper's --grow-to: a node count
    "grow_settle": (0, 86_400),
    "grow_min_gain": (1, 100_000),
    "spare_nodes": (0, 64),
}

PREEMPTIBLE_FEATURE = "preemptible"  # the provider's Slurm feature on preemptible nodes


def in_range(key: str, value: float) -> str | None:
    """Why ``value`` is outside the key's range (`RANGES`); None when it is inside."""
    low, high = RANGES[key]
    if math.isfinite(value) and low <= value <= high:
        return None
    return f"must be from {low:g} to {high:g}"
