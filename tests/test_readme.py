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


REPOSITORY = "https://github.com/slurmpre/slurmpre"


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, no punctuation, spaces as dashes."""
    import re

    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _problem(target: str) -> str | None:
    """Why a link of the README would not lead where it says on a package index's page
    (None: it does). A file of this repository is named by its address on main, and must
    exist here, with the heading its anchor names."""
    import re

    if target.startswith("#"):
        return None
    if not target.startswith(("https://", "http://")):
        return "relative: a package index's page shows the README without the repository"
    for kind in ("blob", "tree"):
        prefix = f"{REPOSITORY}/{kind}/main/"
        if target.startswith(prefix):
            path, _, anchor = target[len(prefix) :].partition("#")
            local = ROOT / path
            if not (local.is_file() if kind == "blob" else local.is_dir()):
                return f"no {path} in this repository"
            headings = re.findall(r"^#+ (.+)$", local.read_text(), re.M) if anchor else []
            if anchor and anchor not in {_slug(h) for h in headings}:
                return f"no heading #{anchor} in {path}"
    return None


def test_every_link_of_the_readme_works_on_a_package_indexs_page() -> None:
    import re

    targets = re.findall(r"\]\(([^)\s]+)\)", (ROOT / "README.md").read_text())
    assert any(t.startswith(f"{REPOSITORY}/blob/main/docs/") for t in targets)
    broken = {t: why for t in targets if (why := _problem(t)) is not None}
    assert not broken, broken


def test_a_link_is_judged_by_where_it_leads() -> None:
    blob = f"{REPOSITORY}/blob/main/"
    assert _problem(f"{blob}docs/spec.md") is None
    anchor = "#scripts-that-can-save-and-go-on-frameworks"  # its heading has a ";"
    assert _problem(f"{blob}docs/how-it-works.md{anchor}") is None
    assert _problem("docs/spec.md") is not None
    assert _problem(f"{blob}docs/no-such-page.md") == "no docs/no-such-page.md in this repository"
    assert _problem(f"{blob}docs/spec.md#no-such-heading") is not None
    assert _problem(f"{REPOSITORY}/tree/main/docs") is None
