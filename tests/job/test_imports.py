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


def test_the_wrapper_loads_what_it_needs_to_launch_and_no_more() -> None:
    """Each of these costs milliseconds of every attempt's start; the watcher loads its
    own in its thread once the training is launched (`slurmpre.job.start.run.Watching`)."""
    later = (
        "slurmpre.job.watch.watcher",
        "slurmpre.job.handover.placing",
        "slurmpre.placement.facts",
        "slurmpre.placement.deadline",
        "hashlib",
        "datetime",
    )
    code = (
        "import slurmpre.job.start.entry, slurmpre.job.start.run\nimport sys\n"
        f"print(sorted(m for m in {later!r} if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]", out.stdout
