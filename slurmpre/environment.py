"""Every ``SLURMPRE_*`` variable, spelled once: what the batch script, the wrapper and the
training process tell one another, and the few a user sets (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# The batch script's exports (templates/default.sbatch.j2 writes these names).
JOB_NAME = "SLURMPRE_JOB_NAME"
CHECKPOINT_DIR = "SLURMPRE_CHECKPOINT_DIR"
LOG_DIR = "SLURMPRE_LOG_DIR"
CODE = "SLURMPRE_CODE"  # the code the job runs, as `slurmpre submit` found it
CODE_DIR = "SLURMPRE_CODE_DIR"  # set when every attempt runs from a snapshot
EXPEDITED = "SLURMPRE_EXPEDITED"  # "1": the job's requeue asked --requeue=expedite
# Set by the batch script's supervisor of steps (`slurmpre.job.handover.steps`) for each step.
IN_PLACE = "SLURMPRE_IN_PLACE"
BATCH_HOST = "SLURMPRE_BATCH_HOST"
# The drained nodes the job releases once the step before this one has ended: this step
# started while it still trained (make before break in place, `handover.overlap`).
RELEASING = "SLURMPRE_RELEASING"
# In a successor's environment, set by the job it takes over from: that job, and the
# run's restarts before this job (so the run's count goes on across jobs).
PREDECESSOR = "SLURMPRE_PREDECESSOR"
EARLIER_RESTARTS = "SLURMPRE_EARLIER_RESTARTS"
# What the wrapper tells the training process (`Training`). Its attempt's control files
# follow from CHECKPOINT_DIR, JOB_TAG, RESTART_COUNT and IN_PLACE (`api.attempt.own_files`).
RESUME_FROM = "SLURMPRE_RESUME_FROM"
RESUME_STEP = "SLURMPRE_RESUME_STEP"
RESTART_COUNT = "SLURMPRE_RESTART_COUNT"
RESTARTS = "SLURMPRE_RESTARTS"
JOB_TAG = "SLURMPRE_JOB_TAG"
WORLD_SIZE = "SLURMPRE_WORLD_SIZE"
PREVIOUS_WORLD_SIZE = "SLURMPRE_PREVIOUS_WORLD_SIZE"
FILE_ACCESS = "SLURMPRE_FILE_ACCESS"
# In a successor's training: the job it takes over from, while the checkpoint is not yet
# chosen (`slurmpre.resume_path()` waits for it, at most RESUME_TIMEOUT seconds).
RESUME_PENDING = "SLURMPRE_RESUME_PENDING"
RESUME_TIMEOUT = "SLURMPRE_RESUME_TIMEOUT"
# What a user may set.
SHARED_WATCH = "SLURMPRE_SHARED_WATCH"  # "0": every job polls Slurm for itself
SHARED_DIR = "SLURMPRE_SHARED_DIR"  # the user's drain board folder
SANDBOX = "SLURMPRE_SANDBOX"  # which of this machine's sandboxes (0-9; 0 when unset)
# Added to the rendezvous port a job derives from its id: set by clusters whose nodes
# share one host (the sandboxes side by side), whose job ids repeat from cluster to cluster.
PORT_OFFSET = "SLURMPRE_PORT_OFFSET"
SANDBOX_DIR = "SLURMPRE_SANDBOX_DIR"  # where the sandbox keeps its state
ROOTS_DIR = "SLURMPRE_ROOTS_DIR"  # where the sandbox's Debian roots are cached
SANDBOX_PROFILE = "SLURMPRE_SANDBOX_PROFILE"  # the login-shell file that puts a root's Slurm first
DEBIAN_MIRROR = "SLURMPRE_DEBIAN_MIRROR"  # the mirror those roots come from
# Set in every task on a sandbox node (its TaskProlog): the node's own folder, a node-local disk.
NODE_LOCAL_DIR = "SLURMPRE_NODE_LOCAL_DIR"
# Set by the wrapper when the spec's `local_dir` is usable on the node: the run's folder there,
# where `slurmpre.checkpoint()` writes first (`slurmpre.tier`).
LOCAL_DIR = "SLURMPRE_LOCAL_DIR"
# "I/N", set on every node when local_dir is on (usable there or not): training node I of N.
LOCAL_NODE = "SLURMPRE_LOCAL_NODE"

# The SLURMPRE_ names a spec's `env` may set; slurmpre sets every other one itself.
USER_SET = frozenset({SHARED_WATCH, SHARED_DIR, PORT_OFFSET})


# What every training process finds set: the batch script's exports and `Training`'s
# (a test holds it to `Training.to_env`). A command's $NAME may name these: the wrapper
# expands it from the training's environment (`slurmpre.job.start.expand`).
ALWAYS = frozenset({
    JOB_NAME, CHECKPOINT_DIR, LOG_DIR, RESUME_FROM, RESUME_STEP, RESTART_COUNT, RESTARTS,
    JOB_TAG, WORLD_SIZE, PREVIOUS_WORLD_SIZE, FILE_ACCESS,
})  # fmt: skip


def text(env: Mapping[str, str], name: str) -> str:
    return env.get(name, "")


def number(env: Mapping[str, str], name: str) -> int | None:
    """The variable as a whole number (None when unset or not one)."""
    raw = env.get(name, "").strip()
    return int(raw) if raw.isdigit() else None


@dataclass(frozen=True)
class Training:
    """What the training process sees on top of the job's own environment."""

    checkpoint_dir: str
    resume_from: str | None
    resume_step: int | None
    restart_count: int  # Slurm's, in this job
    restarts: int  # the run's, across the jobs that took over from one another
    job_tag: str
    world_size: int
    previous_world_size: int | None
    file_access: str

    def to_env(self) -> dict[str, str]:
        def shown(value: int | None) -> str:
            return "" if value is None else str(value)

        return {
            CHECKPOINT_DIR: self.checkpoint_dir,
            RESUME_FROM: self.resume_from or "",
            RESUME_STEP: shown(self.resume_step),
            RESTART_COUNT: str(self.restart_count),
            RESTARTS: str(self.restarts),
            JOB_TAG: self.job_tag,
            WORLD_SIZE: str(self.world_size),
            PREVIOUS_WORLD_SIZE: shown(self.previous_world_size),
            FILE_ACCESS: self.file_access,
        }
