"""hf_job.py's twin for Lightning: a tiny module trained with DDP over gloo, with
slurmpre's lines as in examples/lightning_train.py and the same hold, report and
final weights, run the same two ways.

Each rank's epoch is one batch, so what a step trains on does not depend on where
in an epoch a resume lands (Lightning restores a position inside an epoch only with
a stateful dataloader); the optimizer (SGD with momentum) carries state, so a lost,
repeated or state-less step changes the final weights.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as L
import slurmpre
import torch
from slurmpre.integrations.lightning import SlurmpreCallback, resume_from_checkpoint
from train_tiny import (  # the scripts' folder is sys.path[0]
    framework_job_args,
    hold,
    report_start,
)

STEPS = 30


class Tiny(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)
        )

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x).squeeze(-1), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


class HoldAt(L.Callback):
    """At ``step`` of the first attempt, every rank waits until slurmpre's notice exists;
    every step takes at least ``pace`` seconds."""

    def __init__(self, step: int, out: Path, how: str, pace: float) -> None:
        self.step, self.out, self.how, self.pace = step, out, how, pace

    def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
        time.sleep(self.pace)
        if trainer.global_step != self.step or slurmpre.restart_count() > 0:
            return
        hold(self.how, self.out, 0 if trainer.is_global_zero else 1)


class Report(L.Callback):
    def __init__(self, out: Path) -> None:
        self.out = out

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if trainer.is_global_zero:
            report_start(self.out, trainer.global_step)


def loader(world: int) -> Any:
    g = torch.Generator().manual_seed(0)
    xs = torch.randn(4 * world, 8, generator=g)
    ys = xs.sin().sum(-1)
    return torch.utils.data.DataLoader(list(zip(xs, ys, strict=True)), batch_size=4, shuffle=False)


def main() -> None:
    args = framework_job_args()
    out = Path(args.out)
    # torchrun's environment says how many processes per node and in all.
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    L.seed_everything(0, verbose=False)
    model = Tiny()
    hold_at = HoldAt(args.hold_at, out, args.hold, args.step_seconds)
    if args.requeue_signal:  # the zero-line recipe: Lightning's own save and requeue
        from lightning.pytorch.plugins.environments import SLURMEnvironment

        world = int(os.environ["SLURM_NTASKS"])  # the plain launcher: a task per node
        per_node = 1
        extra: dict[str, Any] = {"plugins": [SLURMEnvironment(requeue_signal=signal.SIGUSR1)]}
        callbacks: list[Any] = [Report(out), hold_at]
        ckpt_path = None  # Lightning resumes from its hpc_ckpt_N.ckpt by itself
    else:
        extra, callbacks = {}, [Report(out), hold_at, SlurmpreCallback()]
        ckpt_path = resume_from_checkpoint()
    trainer = L.Trainer(
        default_root_dir=str(out), max_steps=STEPS, accelerator="cpu", devices=per_node,
        num_nodes=world // per_node, strategy="ddp", logger=False, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False, callbacks=callbacks, **extra,
    )  # fmt: skip
    trainer.fit(model, loader(world), ckpt_path=ckpt_path)
    if trainer.global_step >= STEPS and trainer.is_global_zero:
        torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, out / "final.pt")


if __name__ == "__main__":
    main()
