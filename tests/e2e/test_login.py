"""A job preempted twice on the sandbox (real torchrun, the provider's drain and removal):
first its node that is not the batch host, which is released while training goes on in place
on the batch host; then the batch host, which requeues the job. Both paths end to end,
bit for bit against the uninterrupted run, and the login-node commands on that job:
status, logs --follow, nodes and ckpt prune."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.sandbox.preempt import InBackground, PreemptPlan
from slurmpre.slurm.client import CommandLineSlurm

from tests.conftest import slurmpre_cli, wait_for, wait_preemptible_idle
from tests.e2e.helpers import (
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


def training_in_place(folder: Path) -> bool:
    """The step after the in-place restart has trained 3 steps past where it resumed."""
    runs = [r for r in progress(folder) if r["in_place"] == 1]
    return bool(runs) and step_reached(folder) >= runs[-1]["resumed_step"] + 3


def test_in_place_then_requeue_in_status_logs_nodes_and_prune(
    sandbox: Sandbox, baseline: Any, tmp_path: Path
) -> None:
    slurm = CommandLineSlurm()
    wait_preemptible_idle(slurm)
    window = 30  # the node is removed by then: were it still in the job, the job would fail
    job = submit(
        tmp_path,
        nodes="1-2",
        extra=["--honor-notice"],
        spec_lines=[
            "poll_interval = 1",
            f"preempt_window = {window}",
            "safety_margin = 5",
            'drain_reason = "^preempted"',
        ],
    )
    follower = subprocess.Popen(
        [sys.executable, "-m", "slurmpre", "logs", job, "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    preemptions: list[InBackground] = []
    try:
        running = wait_for("2 nodes", lambda: len((j := slurm.job(job)).nodes) == 2 and j, 60)
        wait_for("step 8", lambda: step_reached(tmp_path) >= 8, timeout=180)
        first = next(n for n in running.nodes if n != running.batch_host)
        # A drain for another reason is no notice (drain_reason): the job stays on the
        # node, and `nodes` shows the drain and this job on the draining node.
        slurm.update_node(first, state="DRAIN", reason="maintenance")
        cap = json.loads(slurmpre_cli("nodes", "--json", check=True).stdout)
        assert [(d["node"], d["reason"]) for d in cap["draining"]] == [(first, "maintenance")]
        assert cap["at_risk"] == [job]
        assert cap["preemptible"]["draining"] == 1
        plan = PreemptPlan(first, window=window, return_after=2, once_empty=True)
        preemptions.append(InBackground(sandbox, plan))
        preemptions[-1].start()

        wait_for("training in place", lambda: training_in_place(tmp_path), timeout=180)
        assert slurm.job(job).nodes == (running.batch_host,)  # the drained node was let go
        second = running.batch_host
        plan = PreemptPlan(second, window=window, return_after=2)
        preemptions.append(InBackground(sandbox, plan))
        preemptions[-1].start()
        wait_done(slurm, job, tmp_path, timeout=400)
        for p in preemptions:
            p.finish()
        out, err = follower.communicate(timeout=120)
    finally:
        if follower.poll() is None:
            follower.kill()
        restore_all(sandbox)
    # `logs --follow` followed the appended log across the in-place restart and the
    # requeue to the end.
    assert follower.returncode == 0, err
    for attempt in range(2):
        assert f"slurmpre: job {job} attempt {attempt} on" in out
    assert "released " + first in out
    assert "attempt 1 ended with exit code 0" in out

    # In place, then a requeue: the drained node released before its removal, the world
    # 2 -> 1, each resume from the notice checkpoint, and the uninterrupted result.
    runs = progress(tmp_path)
    assert [(r["attempt"], r["in_place"]) for r in runs] == [(0, 0), (0, 1), (1, 0)]
    assert [(r["world"], r["previous_world"]) for r in runs[:2]] == [(2, None), (1, 2)]
    records = ledger(tmp_path)
    notice = next(r for r in records if r["event"] == "notice")
    released = next(r for r in records if r["event"] == "in_place")
    assert notice["restart"] == "in_place" and released["released"] == [first]
    assert released["released_at"] < notice["drained_at"] + window
    assert notice["requeue_floor_s"] is not None
    assert same_weights(final_weights(tmp_path), baseline)

    st = json.loads(slurmpre_cli("status", job, "--json", check=True).stdout)
    rows = st["attempts"]
    said = notices(tmp_path)  # the training's own record of where it stopped
    assert [(r["attempt"], r["in_place"]) for r in rows] == [(0, 0), (0, 1), (1, 0)]
    assert [r["ended"] for r in rows] == ["notice -> in place", "notice -> requeue", "completed"]
    assert [r["checkpoint_step"] for r in rows[:2]] == [n["step"] for n in said]
    assert [r["resume_step"] for r in rows[1:]] == [n["step"] for n in said]
    assert [r["resume_step"] for r in rows] == [
        p["resumed_step"] or None for p in progress(tmp_path)
    ]
    assert [r["steps_lost"] for r in rows] == [0, 0, None]
    assert first in rows[0]["nodes"] and first not in rows[1]["nodes"]
    assert rows[1]["nodes"] == [second] and second not in rows[2]["nodes"]
    assert st["state"] == "COMPLETED" and st["restarts"] == 1
    assert st["node_hours"] > 0 and st["cost_preemptible"] == pytest.approx(
        st["cost_on_demand"] / 2
    )
    table = slurmpre_cli("status", job, check=True).stdout
    assert "notice -> in place" in table and "notice -> requeue" in table
    assert "completed" in table
    listed = json.loads(slurmpre_cli("status", "--json", check=True).stdout)
    assert listed["schema"] == "slurmpre/jobs/1"
    mine = listed["jobs"]
    assert any(r["job"] == job and (r["attempts"], r["in_place"]) == (2, 1) for r in mine)

    # prune: keeps the newest complete checkpoint, frees the older ones
    before = sorted(p.name for p in (tmp_path / "ckpt").glob("step-*"))
    pruned = json.loads(
        slurmpre_cli(
            "ckpt", "prune", str(tmp_path / "ckpt"), "--keep", "1", "--json", check=True
        ).stdout
    )
    after = sorted(p.name for p in (tmp_path / "ckpt").glob("step-*"))
    assert after == before[-1:] and len(pruned["removed"]) == len(before) - 1
