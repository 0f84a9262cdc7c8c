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
    """``slurmpre.X`` is ``slurmpre.api.X`` for every name of the training API: the two
    lists are literal (for static tools), this holds them to each other."""
    import slurmpre
    import slurmpre.api

    hooks = {"watch_notices"}  # a test hook, not the API
    assert set(slurmpre.api.__all__) - hooks <= set(slurmpre.__all__)
    for name in set(slurmpre.api.__all__) - hooks:
        assert getattr(slurmpre, name) is getattr(slurmpre.api, name)
    for name in set(slurmpre.__all__) - set(slurmpre.api.__all__):
        assert getattr(slurmpre, name) is not None  # the login side's, on first use
