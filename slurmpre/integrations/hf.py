"""Hugging Face ``Trainer``: save on the preemption notice, stop, resume, and keep the
global batch (``SlurmpreCallback(global_batch=...)``). See docs/how-it-works.md.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

import slurmpre
from slurmpre import environment
from slurmpre.errors import SlurmpreError, UsageError
from slurmpre.integrations import resume_from_checkpoint

__all__ = ["SlurmpreCallback", "resume_from_checkpoint"]


class SlurmpreCallback(TrainerCallback):  # type: ignore[misc]  # the framework is not analysed (pyproject)
    """Makes the Trainer checkpoint and stop on slurmpre's notice; reports each save."""

    def __init__(self, global_batch: int | None = None) -> None:
        self.global_batch = global_batch  # kept across world sizes, when given
        self.notice_step: int | None = None  # where it saved on the notice
        self.stop_step: int | None = None  # where it saved and stopped

    def on_init_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # The Trainer accumulates by itself from args (transformers 5: Accelerate's count
        # is 1), read when training begins: set here, before it does.
        if self.global_batch is None:
            return
        b = slurmpre.batching(self.global_batch, args.per_device_train_batch_size, args.world_size)
        if b.accumulation != args.gradient_accumulation_steps:
            print(
                f"slurmpre: global batch {b.global_batch} on {b.world_size} rank(s) of "
                f"{b.micro_batch}: gradient_accumulation_steps {b.accumulation} "
                f"(was {args.gradient_accumulation_steps})",
                file=sys.stderr,
            )
        args.gradient_accumulation_steps = b.accumulation

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        folder = os.environ.get(environment.CHECKPOINT_DIR)
        if folder and Path(args.output_dir).resolve() != Path(folder).resolve():
            raise UsageError(
                f"TrainingArguments.output_dir = {args.output_dir!r} is not the job's checkpoint "
                f"folder {folder!r}: the next attempt would not find the Trainer's checkpoints "
                f"(set output_dir=os.environ[{environment.CHECKPOINT_DIR!r}])"
            )

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # Every rank calls this at the same step; they agree on the notice together.
        if self.stop_step is not None:
            return
        save = slurmpre.checkpoint_requested()  # the notice: save, and train on
        stop = slurmpre.preemption_requested()  # time to stop: save, and stop
        if save and self.notice_step is None:
            self.notice_step = state.global_step
        if save or stop:
            control.should_save = True
        if stop:
            self.stop_step = state.global_step
            control.should_training_stop = True

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not os.environ.get(environment.CHECKPOINT_DIR):
            return  # not under slurmpre: nothing to report
        path = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if not (state.is_world_process_zero and path.is_dir()):
            return
        try:
            slurmpre.committed(path, state.global_step)
        except SlurmpreError as exc:
            # Training goes on; slurmpre then requeues by its deadline instead of at once.
            print(f"slurmpre: the Trainer's save was not reported: {exc}", file=sys.stderr)
