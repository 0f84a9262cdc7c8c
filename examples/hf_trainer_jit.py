"""A Hugging Face Trainer fine-tune with no slurmpre line at all: the Trainer's own
just-in-time checkpoint (transformers >= 5, `enable_jit_checkpoint=True`) saves on
SIGTERM, which slurmpre sends on the preemption notice (`notice_signal = "TERM"` in
examples/hf-trainer-jit.toml), and the restart gets `--resume_from_checkpoint PATH`
(`resume_arg`). What this recipe cannot promise is in docs/recipes.md: the step the
save interrupts is computed twice. For that promise, use examples/hf_trainer.py.
"""

import argparse
import os

import torch
from transformers import Trainer, TrainingArguments, set_seed


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)

    def forward(self, x, labels):
        return {"loss": torch.nn.functional.mse_loss(self.lin(x).squeeze(-1), labels)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--resume_from_checkpoint", default=None)
    cli = parser.parse_args()
    set_seed(0)
    xs = torch.randn(256, 4, generator=torch.Generator().manual_seed(0))
    data = [{"x": x, "labels": x.sum()} for x in xs]
    args = TrainingArguments(
        output_dir=os.environ.get("SLURMPRE_CHECKPOINT_DIR", "hf-out"),
        max_steps=int(os.environ.get("STEPS", "2000")),
        per_device_train_batch_size=8,
        save_strategy="steps",
        save_steps=500,
        enable_jit_checkpoint=True,  # save on SIGTERM
        use_cpu=not torch.cuda.is_available(),
        report_to=[],
    )
    trainer = Trainer(model=Tiny(), args=args, train_dataset=data)
    trainer.train(resume_from_checkpoint=cli.resume_from_checkpoint)


if __name__ == "__main__":
    main()
