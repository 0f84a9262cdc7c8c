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


def test_the_first_screen_holds_the_two_commands_and_the_quickstart() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) < 100
    screen = "\n".join(lines[:40])
    assert "```sh\n./bin/drill\n```" in screen
    assert "<!-- test-command -->\n```sh\n./bin/test\n```" in screen  # what CI runs
    for shown in ("```toml", "slurmpre submit my-job.toml", "slurmpre status"):
        assert shown in screen, shown


def test_every_relative_link_of_the_readme_and_the_docs_leads_to_a_file() -> None:
    import re

    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if "://" in target or target.startswith("#"):
                continue
            path = (page.parent / target.split("#")[0]).resolve()
            if not path.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, broken
