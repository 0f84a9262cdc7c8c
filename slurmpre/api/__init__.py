"""What training scripts import: where to resume, restart facts, and an atomic checkpoint.

Light on purpose (no click, no jinja2, no torch at import): every rank imports it.

    import slurmpre
    if (path := slurmpre.resume_path()) is not None:
        load(path)
    ...
    with slurmpre.checkpoint(step) as path:
        save(path)  # every rank, e.g. torch.distributed.checkpoint.save(..., checkpoint_id=path)
    slurmpre.committed(path_the_framework_saved)  # or: a framework saved by itself
"""

from slurmpre.api.attempt import (
    checkpoint_dir,
    previous_world_size,
    ranks,
    restart_count,
    resume_path,
    resume_step,
    world_size,
)
from slurmpre.api.notices import checkpoint_requested, preemption_requested, watch_notices
from slurmpre.api.saving import checkpoint, committed

__all__ = [
    "checkpoint",
    "checkpoint_dir",
    "checkpoint_requested",
    "committed",
    "preemption_requested",
    "previous_world_size",
    "ranks",
    "restart_count",
    "resume_path",
    "resume_step",
    "watch_notices",
    "world_size",
]
