"""A Hugging Face Trainer fine-tune that loses nothing to a preemption: the 3 lines
marked "slurmpre" are all it takes. Runs as is on CPU (a tiny regression model), on
the local sandbox or a real cluster: `slurmpre submit examples/hf-trainer.toml`.
"""

import os

import torch
from transformers import Trainer, TrainingArguments, set_seed

from slurmpre.integrations.hf import SlurmpreCallback, resume_from_checkpoint  # slurmpre


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)

    def forward(self, x, labels):
        return {"loss": torch.nn.functional.mse_loss(self.lin(x).squeeze(-1), labels)}


def main():
    set_seed(0)
    xs = torch.randn(256, 4, generator=torch.Generator().manual_seed(0))
    data = [{"x": x, "labels": x.sum()} for x in xs]
    args = TrainingArguments(
        output_dir=os.environ.get("SLURMPRE_CHECKPOINT_DIR", "hf-out"),  # slurmpre's folder
        max_steps=int(os.environ.get("STEPS", "2000")),
        per_device_train_batch_size=8,
        learning_rate=0.01,
        save_steps=500,
        logging_steps=100,
        report_to=[],
        use_cpu=not torch.cuda.is_available(),
    )
    trainer = Trainer(Tiny(), args, train_dataset=data, callbacks=[SlurmpreCallback()])  # slurmpre
    trainer.train(resume_from_checkpoint=resume_from_checkpoint())  # slurmpre


if __name__ == "__main__":
    main()
