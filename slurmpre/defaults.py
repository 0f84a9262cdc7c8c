"""Every default of the preemption path, defined once.

They travel spec -> template -> the wrapper's arguments -> `WatchConfig`; the
wrapper's own defaults (for a hand-run ``slurmpre run``) are these too.
"""

from __future__ import annotations

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

PREEMPTIBLE_FEATURE = "preemptible"  # the provider's Slurm feature on preemptible nodes
