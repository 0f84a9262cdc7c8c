"""`slurmpre.submit(..., dry_run=True)`: what `submit` would queue, after every check it
makes, queueing nothing and making no folder, as `submit --dry-run` does."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
import slurmpre
from slurmpre.errors import UsageError
from slurmpre.login.launch import DryRun
from slurmpre.login.render import render
from slurmpre.slurm.parse import JobInfo

from tests.fakes import Jobs
from tests.test_resuming import finished_run


class Verdicts(Jobs):
    """A Slurm that answers `sbatch --test-only`, and fails the test on a real submit."""

    def __init__(self, known: dict[str, JobInfo] | None = None) -> None:
        super().__init__(known or {})
        self.tested: list[str] = []

    def submit(self, script: str, *, args: Sequence[str] = (), test_only: bool = False) -> str:
        if not test_only:
            raise self._unexpected("submit (a dry run queued the job)")
        self.tested.append(script)
        return "sbatch: Job 0 to start at 2026-12-05T06:00:00 using 1 processors"


def _spec(folder: Path, **more: object) -> dict[str, object]:
    return {"name": "exp", "command": ["train.py"], "checkpoint_dir": str(folder),
            "python": sys.executable, **more}  # fmt: skip


def test_a_dry_run_returns_the_script_and_queues_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    folder = tmp_path / "ck"
    client = Verdicts()
    got = slurmpre.submit(_spec(folder), nodes="1-2", client=client, dry_run=True)
    assert isinstance(got, DryRun)
    assert got.spec.name == "exp" and str(got.spec.nodes) == "1-2"
    assert got.script == render(got.spec)  # what `submit --dry-run` prints
    assert client.tested == []  # as `submit --dry-run`: no job, and no sbatch at all
    assert not folder.exists() and not (tmp_path / "state").exists()  # no folder, no index


@pytest.mark.parametrize(
    ("case", "named"),
    [("python", "cannot run"),
     ("finished", "job 41 finished its training"),
     ("live", "in use by job 50"),
     ("deadline", "past")],
)  # fmt: skip
def test_a_dry_run_refuses_what_submit_refuses(tmp_path: Path, case: str, named: str) -> None:
    folder = tmp_path / "ck"
    spec, known = _spec(folder), {}
    if case == "python":
        spec["python"] = str(tmp_path / "no-such-python")
    elif case == "finished":
        finished_run(folder, "41", 30)
    elif case == "live":
        finished_run(folder, "50", 30)
        known = {"50": JobInfo("50", "exp", "RUNNING", None, 0, True, ("n1",), "1", None, "n1",
                               None, {})}  # fmt: skip
        spec["command"] = ["other.py"]
    else:
        spec.update(deadline="2020-01-01T00:00:00Z", total_steps=1000)
    client = Verdicts(known)
    with pytest.raises(UsageError, match=named):
        slurmpre.submit(spec, client=client, dry_run=True)
    assert client.tested == []


def test_dry_run_is_true_or_false() -> None:
    with pytest.raises(UsageError, match="dry_run"):
        slurmpre.submit({"name": "x", "command": "x"}, dry_run="yes")  # type: ignore[call-overload]
