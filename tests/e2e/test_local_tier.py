"""End to end, with the node-local tier (`local_dir = "auto"`): a two-node job whose
other node drains restarts in place on the batch host. Its notice save is on the nodes;
the batch host pulls the drained node's part before that node goes (the notice counts
as answered then, not at the flush's commit), and the next step resumes at the notice's
step, bit for bit as an uninterrupted run. Each node also keeps the other's newest part."""

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


def test_in_place_the_kept_node_pulls_the_notice_save_and_no_step_is_lost(
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
    # Its pull ends ok, unless this small save's flush committed it first and the step
    # ended with the pull under way (a big state's does not: bench/big_state.py).
    done = [r for r in records if r["event"] == "pull_done"]
    assert all(r["ok"] and r["predecessor"] == job for r in done)
    # The next step resumed from the notice's step: taken over from the batch host's RAM
    # when the flush had not committed it yet (a big state: bench/big_state.py), else from
    # the folder, where this small one lands within a second.
    folder = tmp_path / "ckpt"
    start = next(r for r in records if r["event"] == "start" and r.get("in_place") == 1)
    assert start["resume_from"] == str(folder / f"step-{seen['step']:08d}")
    adopted = [r for r in records if r["event"] == "adopted"]
    assert all(r["in_place"] == 1 and r["step"] == seen["step"] for r in adopted)
    kept = {r["node"] for r in records if r["event"] == "replicated" and not r.get("in_place")}
    assert kept == {0, 1}  # each node kept the other's part of a save before the drain
    assert (folder / f"step-{seen['step']:08d}").is_dir()
    print(
        f"in place with the tier (tuned): step {seen['step']} pulled onto the batch host, "
        f"trained again {runs[1]['started_at'] - seen['at']:.1f} s after the notice"
    )
