"""A Hugging Face Trainer fine-tune for the end-to-end test: a tiny GPT-2 built from a
config (no download), slurmpre's three lines as in examples/hf_trainer.py, and what
the test needs to watch it: a hold at one step of the first attempt until the
notice is there (so the drain cannot miss the run), a line per attempt saying the
step it started from, and the final weights.

Run under slurmpre (the output folder is the job's) or, for the uninterrupted
reference, under a plain ``torchrun --standalone`` with ``--out``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import slurmpre
import torch
import transformers
from slurmpre.integrations.hf import SlurmpreCallback, resume_from_checkpoint
from train_tiny import (  # the scripts' folder is sys.path[0]
    framework_job_args,
    hold,
    report_start,
)

STEPS = 30


class HoldAt(transformers.TrainerCallback):  # type: ignore[misc]
    """At ``step`` of the first attempt, every rank waits until slurmpre's notice exists;
    every step takes at least ``pace`` seconds."""

    def __init__(self, step: int, out: Path, how: str, pace: float) -> None:
        self.step, self.out, self.how, self.pace = step, out, how, pace

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        time.sleep(self.pace)
        if state.global_step != self.step or slurmpre.restart_count() > 0:
            return
        hold(self.how, self.out, 0 if state.is_world_process_zero else 1)


class MidStep(transformers.TrainerCallback):  # type: ignore[misc]
    """The zero-line recipe's pace: each step's time is spent inside the step (after the
    Trainer's own JIT callback has looked at on_step_begin), where a real step spends it
    computing. At the start of ``step`` of the first attempt it holds until the notice,
    then computes for 8 s: slurmpre's SIGTERM comes within a second or so of the
    notice, and the Trainer raises its flag 3 s after it, inside this step, as it would
    inside any long step. Every step's beginning is logged with the attempt, to show
    which step ran twice."""

    def __init__(self, step: int, out: Path, pace: float) -> None:
        self.step, self.out, self.pace = step, out, pace

    def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if state.is_world_process_zero:
            with (self.out / "steps.jsonl").open("a") as f:
                f.write(json.dumps({"step": state.global_step, "run": slurmpre.restart_count()}))
                f.write("\n")
        if state.global_step == self.step and slurmpre.restart_count() == 0:
            hold("notice", self.out, 0 if state.is_world_process_zero else 1)
            time.sleep(8.0)
        time.sleep(self.pace)


class Report(transformers.TrainerCallback):  # type: ignore[misc]
    def __init__(self, out: Path) -> None:
        self.out = out

    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if state.is_world_process_zero:
            report_start(self.out, state.global_step)


def data() -> list[dict[str, Any]]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 64, (64, 12), generator=g)
    return [{"input_ids": row, "labels": row} for row in ids]


def main() -> None:
    args = framework_job_args()
    out = Path(args.out)
    transformers.set_seed(0)
    config = transformers.GPT2Config(
        vocab_size=64, n_positions=16, n_embd=16, n_layer=2, n_head=2, bos_token_id=0,
        eos_token_id=0,
    )  # fmt: skip
    model = transformers.GPT2LMHeadModel(config)  # dropout on: the RNG state matters
    training = transformers.TrainingArguments(
        output_dir=str(out), max_steps=STEPS, per_device_train_batch_size=4,
        learning_rate=1e-3, save_strategy="steps", save_steps=10, logging_strategy="no",
        report_to=[], disable_tqdm=True, use_cpu=True, seed=0, dataloader_num_workers=0,
        ddp_backend="gloo", enable_jit_checkpoint=args.jit,
    )  # fmt: skip
    if args.jit:  # the recipe: the Trainer's own save on SIGTERM, the path as an argument
        callbacks = [Report(out), MidStep(args.hold_at, out, args.step_seconds)]
        resume = args.resume_from_checkpoint
    else:
        hold_at = HoldAt(args.hold_at, out, args.hold, args.step_seconds)
        callbacks = [Report(out), hold_at, SlurmpreCallback()]
        resume = resume_from_checkpoint()
    trainer = transformers.Trainer(
        model=model, args=training, train_dataset=data(), callbacks=callbacks
    )
    trainer.train(resume_from_checkpoint=resume)
    if trainer.state.global_step >= STEPS and trainer.is_world_process_zero():
        torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, out / "final.pt")


if __name__ == "__main__":
    main()
