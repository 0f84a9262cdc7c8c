"""The README's training loop is examples/train_loop.py's, which a test runs preempted
(tests/e2e/test_readme_loop.py): what users copy is what was tested."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "# --- the README's loop ---\n", "# --- end of the README's loop ---"


def test_the_readmes_training_loop_is_the_tested_example() -> None:
    example = (ROOT / "examples" / "train_loop.py").read_text()
    loop = example[example.index(BEGIN) + len(BEGIN) : example.index(END)]
    readme = (ROOT / "README.md").read_text()
    lead = "In `train.py`, on every rank"
    block = readme[readme.index("```python\n", readme.index(lead)) + len("```python\n") :]
    block = block[: block.index("```\n")]
    assert block == "import slurmpre\nimport torch.distributed.checkpoint as dcp\n\n" + loop
    assert (
        "import slurmpre\n" in example and "import torch.distributed.checkpoint as dcp\n" in example
    )
