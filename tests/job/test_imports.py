"""The job side starts fast and imports nothing of the login side: what `python -m
slurmpre.job` (and `slurmpre run`) load must hold neither click nor jinja2."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("click", "jinja2", "slurmpre.cli", "slurmpre.login")


@pytest.mark.parametrize(
    "entry",
    [
        "import slurmpre.job.start.entry, slurmpre.job.start.run, slurmpre.job.handover.steps",
        "import slurmpre.console",
        "import slurmpre, slurmpre.api",  # what a training script imports
    ],
)
def test_the_job_side_imports_neither_click_nor_jinja2(entry: str) -> None:
    code = f"{entry}\nimport sys\nprint(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]", out.stdout


def test_the_package_offers_the_whole_training_api_and_each_name_resolves() -> None:
    """``slurmpre.X`` is ``slurmpre.api.X`` for every name of the training API (named once,
    by slurmpre), and the login side's names resolve on first use."""
    import slurmpre
    import slurmpre.api

    for name in slurmpre.TRAINING_API:
        assert getattr(slurmpre, name) is getattr(slurmpre.api, name)
    for name in slurmpre.__all__:
        assert getattr(slurmpre, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        slurmpre.nope  # noqa: B018
