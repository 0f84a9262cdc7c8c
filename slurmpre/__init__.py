"""slurmpre: run ML jobs on preemptible Slurm nodes and lose no work when a node is taken back.

This module stays light: training scripts import it inside every rank, so it
imports neither click nor jinja2 (nor torch).
"""

__version__ = "0.1.0"

from slurmpre.api import (
    checkpoint,
    checkpoint_dir,
    preemption_requested,
    previous_world_size,
    restart_count,
    resume_path,
    resume_step,
    world_size,
)

__all__ = [
    "__version__",
    "checkpoint",
    "checkpoint_dir",
    "preemption_requested",
    "previous_world_size",
    "restart_count",
    "resume_path",
    "resume_step",
    "world_size",
]
