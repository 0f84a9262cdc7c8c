"""Lightning: save on the preemption notice, stop, and resume.

    from slurmpre.integrations.lightning import SlurmpreCallback, resume_from_checkpoint

    trainer = L.Trainer(default_root_dir=os.environ["SLURMPRE_CHECKPOINT_DIR"],
                        callbacks=[SlurmpreCallback()], ...)
    trainer.fit(model, data, ckpt_path=resume_from_checkpoint())

On a notice every rank agrees on the batch (one small all_reduce under DDP, which
Lightning has initialized), the trainer saves ``step=N.ckpt`` into the job's
checkpoint folder there and stops; the save is reported to slurmpre
(`slurmpre.committed`), so the job is requeued at once. Lightning's own
``lightning_logs/version_N/checkpoints/`` is where the resolver also looks.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from lightning.pytorch import Callback

import slurmpre
from slurmpre.errors import SlurmpreError
from slurmpre.integrations import resume_from_checkpoint

__all__ = ["SlurmpreCallback", "resume_from_checkpoint"]


class SlurmpreCallback(Callback):  # type: ignore[misc]  # the framework is not analysed (pyproject)
    """Makes the trainer checkpoint into slurmpre's folder and stop on slurmpre's notice."""

    def __init__(self) -> None:
        self.notice_step: int | None = None

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self.notice_step is not None or not slurmpre.preemption_requested():
            return
        folder = os.environ.get("SLURMPRE_CHECKPOINT_DIR")
        self.notice_step = int(trainer.global_step)
        if folder:
            path = Path(folder) / f"step={self.notice_step}.ckpt"
            trainer.save_checkpoint(path)  # every rank takes part; rank 0 writes
            if trainer.is_global_zero:
                try:
                    slurmpre.committed(path, self.notice_step)
                except SlurmpreError as exc:
                    print(f"slurmpre: the trainer's save was not reported: {exc}", file=sys.stderr)
        trainer.should_stop = True
