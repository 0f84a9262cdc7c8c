"""A Lightning training run that loses nothing to a preemption: the 3 lines marked
"slurmpre" are all it takes. Runs as is on CPU (a tiny regression model), on the
local sandbox or a real cluster: `slurmpre submit examples/lightning.toml`.
"""

import os

import lightning.pytorch as L
import torch

from slurmpre.integrations.lightning import SlurmpreCallback, resume_from_checkpoint  # slurmpre


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)
        )

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x).squeeze(-1), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


def main():
    L.seed_everything(0)
    xs = torch.randn(1024, 8, generator=torch.Generator().manual_seed(0))
    data = torch.utils.data.DataLoader(list(zip(xs, xs.sin().sum(-1))), batch_size=32)
    # slurmpre starts torchrun on every node: its environment says how many processes
    # run per node and in all, which Lightning needs as devices and num_nodes.
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    folder = os.environ.get("SLURMPRE_CHECKPOINT_DIR", "lightning-out")  # slurmpre's folder
    trainer = L.Trainer(
        default_root_dir=folder,
        max_steps=int(os.environ.get("STEPS", "2000")),
        accelerator="auto",
        devices=per_node,
        num_nodes=world // per_node,
        callbacks=[SlurmpreCallback()],  # slurmpre
    )
    trainer.fit(Tiny(), data, ckpt_path=resume_from_checkpoint())  # slurmpre


if __name__ == "__main__":
    main()
