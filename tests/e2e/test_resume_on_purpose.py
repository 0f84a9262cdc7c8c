"""End to end (#23 item 3): a finished run's folder is not resumed by accident. The
README's loop trains to its end on the sandbox; submitting into its folder again is
refused; with --resume a longer run goes on from its last checkpoint (only the new
steps train); with --fresh the folder is moved aside, kept whole, and training starts
at step 0."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from slurmpre.folder import checkpoints
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.slurm.client import CommandLineSlurm

from tests.conftest import slurmpre_cli, wait_preemptible_idle
from tests.e2e.helpers import jsonl, wait_done, write_spec

pytest.importorskip("torch", reason="the e2e extra (torch==2.13.0) is not installed")

pytestmark = [pytest.mark.sandbox, pytest.mark.e2e]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_loop.py"


def spec_for(tmp_path: Path, steps: int, log: Path) -> Path:
    command = [sys.executable, str(EXAMPLE), "--steps", str(steps), "--every", "5"]
    return write_spec(
        tmp_path, f"again-{steps}", [*command, "--log", str(log)], ["poll_interval = 1"], nodes="1"
    )


def test_a_finished_folder_is_refused_then_resumed_or_moved_aside_on_purpose(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    slurm = CommandLineSlurm()
    wait_preemptible_idle(slurm)
    log = tmp_path / "steps.jsonl"
    ckpt = tmp_path / "ckpt"
    ten, fourteen = spec_for(tmp_path, 10, log), spec_for(tmp_path, 14, log)

    first = slurmpre_cli("submit", str(ten), check=True)
    assert "starts at step 0: no complete checkpoint in the folder" in first.stderr
    first_job = first.stdout.strip()
    wait_done(slurm, first_job, tmp_path)
    assert [t["step"] for t in jsonl(log)] == list(range(10))

    known = {j.job_id for j in slurm.jobs()}
    again = slurmpre_cli("submit", str(fourteen))
    assert again.returncode == 2, again.stderr
    # One line, beside the import check's progress lines on a slow day.
    said = [ln for ln in again.stderr.splitlines() if not ln.startswith("slurmpre: checking")]
    assert len(said) == 1, again.stderr
    assert f"job {first_job} finished its training there" in again.stderr
    assert f"step 10 (step-00000010, written by job {first_job}," in again.stderr
    assert {j.job_id for j in slurm.jobs()} == known  # nothing was queued

    resumed = slurmpre_cli("submit", str(fourteen), "--resume", check=True)
    assert f"resumes from step 10 (step-00000010, written by job {first_job}," in resumed.stderr
    wait_done(slurm, resumed.stdout.strip(), tmp_path)
    assert [t["step"] for t in jsonl(log)] == list(range(14))  # only the new steps trained

    fresh = slurmpre_cli("submit", str(fourteen), "--fresh", check=True)
    (aside,) = [p for p in tmp_path.iterdir() if p.name.startswith("ckpt.")]
    assert f"moved the earlier ckpt aside to {aside}; starts at step 0" in fresh.stderr
    wait_done(slurm, fresh.stdout.strip(), tmp_path)
    assert [t["step"] for t in jsonl(log)] == [*range(14), *range(14)]  # from step 0 again
    # The earlier runs' work, whole (the loop saves every 5 steps, not at its end).
    assert sorted(c.step for c in checkpoints.list_all(aside) if c.complete) == [5, 10]
    assert sorted(c.step for c in checkpoints.list_all(ckpt) if c.complete) == [5, 10]
    assert (aside / "logs" / f"again-10-{first_job}.out").exists()  # its logs went with it
