"""Lightning: save on the preemption notice, stop, resume, and keep the global batch
(``SlurmpreCallback(global_batch=...)``). See docs/how-it-works.md.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from lightning.pytorch import Callback

import slurmpre
from slurmpre import environment
from slurmpre.errors import SlurmpreError, UsageError
from slurmpre.integrations import resume_from_checkpoint

__all__ = ["SlurmpreCallback", "resume_from_checkpoint"]


class SlurmpreCallback(Callback):  # type: ignore[misc]  # the framework is not analysed (pyproject)
    """Makes the trainer checkpoint into slurmpre's folder and stop on slurmpre's notice."""

    def __init__(self, global_batch: int | None = None, micro_batch: int | None = None) -> None:
        self.global_batch, self.micro_batch = global_batch, micro_batch
        self.notice_step: int | None = None  # where it saved on the notice
        self.stop_step: int | None = None  # where it saved and stopped

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if self.global_batch is None:
            return
        micro = self.micro_batch or getattr(trainer.train_dataloader, "batch_size", None)
        if not micro:
            raise UsageError(
                "SlurmpreCallback(global_batch=...) cannot tell the training loader's batch "
                "size: give micro_batch= too"
            )
        b = slurmpre.batching(self.global_batch, int(micro), int(trainer.world_size))
        trainer.accumulate_grad_batches = b.accumulation

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self.stop_step is not None:
            return
        save = slurmpre.checkpoint_requested()  # the notice: save, and train on
        stop = slurmpre.preemption_requested()  # time to stop: save, and stop
        if not (save or stop):
            return
        step = int(trainer.global_step)
        if save and self.notice_step is None:
            self.notice_step = step
        folder = os.environ.get(environment.CHECKPOINT_DIR)
        if folder:
            path = Path(folder) / f"step={step}.ckpt"
            trainer.save_checkpoint(path)  # every rank takes part; rank 0 writes
            if trainer.is_global_zero:
                try:
                    slurmpre.committed(path, step)
                except SlurmpreError as exc:
                    print(f"slurmpre: the trainer's save was not reported: {exc}", file=sys.stderr)
        if stop:
            self.stop_step = step
            trainer.should_stop = True
