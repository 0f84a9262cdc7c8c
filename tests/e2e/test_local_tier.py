"""End to end, with the node-local tier (`local_dir = "auto"`): a two-node job whose
other node drains restarts in place on the batch host. Its notice save is on the nodes;
the batch host pulls the drained node's part before that node goes, and the next step
takes the whole copy over from the batch host's node-local folder: it resumes at the
notice's step without waiting for the flush, and ends bit for bit as an uninterrupted run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.sandbox.preempt import PreemptPlan
from slurmpre.slurm.client import CommandLineSlurm

from tests.conftest import wait_for, wait_preemptible_idle
from tests.e2e.helpers import (
    Preemption,
    final_weights,
    ledger,
    notices,
    progress,
    restore_all,
    same_weights,
    step_reached,
    submit,
    wait_done,
)

pytest.importorskip("torch", reason="the e2e extra (torch==2.13.0) is not installed")

pytestmark = [pytest.mark.sandbox, pytest.mark.e2e]


def test_in_place_the_kept_node_pulls_the_notice_save_and_the_next_step_takes_it_over(
    sandbox: Sandbox, baseline: Any, tmp_path: Path
) -> None:
    slurm = CommandLineSlurm()
    wait_preemptible_idle(slurm)
    job = submit(
        tmp_path,
        nodes="1-2",
        extra=["--honor-notice"],
        spec_lines=[
            "poll_interval = 1",
            "preempt_window = 30",
            "safety_margin = 5",
            'local_dir = "auto"',
        ],
    )
    running = wait_for("2 nodes", lambda: len((j := slurm.job(job)).nodes) == 2 and j, 60)
    wait_for("step 8", lambda: step_reached(tmp_path) >= 8, timeout=180)
    other = next(n for n in running.nodes if n != running.batch_host)
    preemption = Preemption(sandbox, PreemptPlan(other, window=30, return_after=2, once_empty=True))
    preemption.start()
    try:
        wait_done(slurm, job, tmp_path, timeout=300)
        preemption.finish()
    finally:
        restore_all(sandbox)
    (seen,) = notices(tmp_path)
    runs = progress(tmp_path)
    assert [(r["attempt"], r["in_place"]) for r in runs] == [(0, 0), (0, 1)]
    assert runs[1]["resumed_step"] == seen["step"]  # zero steps lost
    assert same_weights(final_weights(tmp_path), baseline)
    records = ledger(tmp_path)
    (asked,) = [r for r in records if r["event"] == "pull_asked"]
    assert asked["pullers"] == [0] and asked["step"] == seen["step"]
    (done,) = [r for r in records if r["event"] == "pull_done"]
    assert done["ok"] and done["predecessor"] == job and done.get("in_place", 0) == 0
    (adopted,) = [r for r in records if r["event"] == "adopted"]
    assert adopted["in_place"] == 1 and adopted["step"] == seen["step"]
    folder = tmp_path / "ckpt"
    start = next(r for r in records if r["event"] == "start" and r.get("in_place") == 1)
    assert start["resume_from"] == str(folder / f"step-{seen['step']:08d}")
    assert not runs[1]["resume_path"].startswith(str(folder))  # from RAM, not the folder
    flushed = [r for r in records if r["event"] == "checkpoint" and r["step"] == seen["step"]]
    assert flushed and (folder / f"step-{seen['step']:08d}").is_dir()
    print(
        f"in place with the tier (tuned): step {seen['step']} pulled onto the batch host, "
        f"trained again {runs[1]['started_at'] - seen['at']:.1f} s after the notice"
    )
