"""A Lightning job with no slurmpre line at all: Lightning's SLURMEnvironment saves
hpc_ckpt_N.ckpt on its requeue signal, which slurmpre sends on the preemption notice
(`notice_signal = "USR1"` in examples/lightning-requeue-signal.toml), requeues the job
itself, and resumes from that file by itself. One process per node (the plain
launcher: Lightning reads Slurm's task ranks). What this recipe cannot promise is in
docs/recipes.md; for bit-identical resumes, use examples/lightning_train.py.
"""

import os
import signal

import lightning.pytorch as L
import torch
from lightning.pytorch.plugins.environments import SLURMEnvironment


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.lin(x).squeeze(-1), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main():
    L.seed_everything(0)
    xs = torch.randn(256, 4, generator=torch.Generator().manual_seed(0))
    data = torch.utils.data.DataLoader(list(zip(xs, xs.sum(-1))), batch_size=8)
    trainer = L.Trainer(
        default_root_dir=os.environ.get("SLURMPRE_CHECKPOINT_DIR", "lightning-out"),
        max_steps=int(os.environ.get("STEPS", "2000")),
        num_nodes=int(os.environ.get("SLURM_NNODES", "1")),
        devices=1,
        accelerator="auto",
        plugins=[SLURMEnvironment(requeue_signal=signal.SIGUSR1)],  # save + requeue on USR1
        logger=False,
    )
    trainer.fit(Tiny(), data)  # ckpt_path=None: Lightning resumes from hpc_ckpt_N.ckpt


if __name__ == "__main__":
    main()
