"""Slurm's job states (``JobState=`` in scontrol's output), spelled here once, and what
slurmpre makes of them."""

from __future__ import annotations

PENDING = "PENDING"
RUNNING = "RUNNING"
COMPLETING = "COMPLETING"
COMPLETED = "COMPLETED"
FAILED = "FAILED"
CANCELLED = "CANCELLED"
TIMEOUT = "TIMEOUT"
NODE_FAIL = "NODE_FAIL"
OUT_OF_MEMORY = "OUT_OF_MEMORY"
BOOT_FAIL = "BOOT_FAIL"
DEADLINE = "DEADLINE"
PREEMPTED = "PREEMPTED"
# 25.11+: a job requeued with --requeue=expedite, waiting to start again at once.
EXPEDITING = "EXPEDITING"
WAITING = frozenset({PENDING, EXPEDITING})  # queued, to run (again)

# A finished job holds nothing and will not run again; one holding nodes is billed for them.
FINISHED = frozenset({
    COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, BOOT_FAIL, DEADLINE,
    PREEMPTED,
})  # fmt: skip
HOLDING_NODES = frozenset({RUNNING, COMPLETING})
UNKNOWN_TO_SLURM = "UNKNOWN TO SLURM"  # what slurmpre calls the state of a job Slurm forgot
