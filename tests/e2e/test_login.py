"""The login-node commands on a real job: status, logs --follow and nodes, for a job
preempted twice on the sandbox (real torchrun, the provider's drain and removal)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.sandbox.preempt import InBackground, PreemptPlan
from slurmpre.slurm.client import CommandLineSlurm

from tests.conftest import slurmpre_cli, wait_for, wait_preemptible_idle
from tests.e2e.helpers import notices, progress, restore_all, step_reached, submit, wait_done

pytest.importorskip("torch", reason="the e2e extra (torch==2.13.0) is not installed")

pytestmark = [pytest.mark.sandbox, pytest.mark.e2e]


def attempt_step(folder: Path, attempt: int) -> int:
    try:
        return int((folder / "ckpt" / f"progress-step.attempt-{attempt}").read_text() or 0)
    except (OSError, ValueError):
        return 0


def test_a_job_preempted_twice_in_status_logs_and_nodes(sandbox: Sandbox, tmp_path: Path) -> None:
    slurm = CommandLineSlurm()
    wait_preemptible_idle(slurm)
    job = submit(
        tmp_path,
        nodes="1-2",
        steps=80,
        extra=["--honor-notice"],
        spec_lines=["poll_interval = 1", "preempt_window = 30", "safety_margin = 5"],
    )
    follower = subprocess.Popen(
        [sys.executable, "-m", "slurmpre", "logs", job, "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    preemptions: list[InBackground] = []
    try:
        wait_for("step 8", lambda: step_reached(tmp_path) >= 8, timeout=180)
        first = slurm.job(job).nodes[-1]
        preemptions.append(InBackground(sandbox, PreemptPlan(first, window=30, return_after=2)))
        preemptions[-1].start()
        wait_for("the drain", lambda: preemptions[0].events, timeout=30)
        # `nodes` shows the drain, and this job on the draining node, in one call.
        cap = json.loads(slurmpre_cli("nodes", "--json", check=True).stdout)
        assert [d["node"] for d in cap["draining"]] == [first]
        assert cap["at_risk"] == [job]
        assert cap["preemptible"]["draining"] == 1

        wait_for("attempt 1 training", lambda: attempt_step(tmp_path, 1) >= 3, timeout=180)
        second = slurm.job(job).nodes[0]
        preemptions.append(InBackground(sandbox, PreemptPlan(second, window=30, return_after=2)))
        preemptions[-1].start()
        wait_done(slurm, job, tmp_path, timeout=400)
        for p in preemptions:
            p.finish()
        out, err = follower.communicate(timeout=120)
    finally:
        if follower.poll() is None:
            follower.kill()
        restore_all(sandbox, slurm)
    # `logs --follow` followed the appended log across both requeues to the end.
    assert follower.returncode == 0, err
    for attempt in range(3):
        assert f"slurmpre: job {job} attempt {attempt} on" in out
    assert "attempt 2 ended with exit code 0" in out

    st = json.loads(slurmpre_cli("status", job, "--json", check=True).stdout)
    rows = st["attempts"]
    said = notices(tmp_path)  # the training's own record of where it stopped
    assert [r["ended"] for r in rows] == ["notice -> requeue", "notice -> requeue", "completed"]
    assert [r["checkpoint_step"] for r in rows[:2]] == [n["step"] for n in said]
    assert [r["resume_step"] for r in rows[1:]] == [n["step"] for n in said]
    assert [r["resume_step"] for r in rows] == [
        p["resumed_step"] or None for p in progress(tmp_path)
    ]
    assert [r["steps_lost"] for r in rows] == [0, 0, None]
    assert first in rows[0]["nodes"] and first not in rows[1]["nodes"]
    assert rows[1]["nodes"] == [second] and second not in rows[2]["nodes"]
    assert st["state"] == "COMPLETED" and st["restarts"] == 2
    assert st["node_hours"] > 0 and st["cost_preemptible"] == pytest.approx(
        st["cost_on_demand"] / 2
    )
    table = slurmpre_cli("status", job, check=True).stdout
    assert table.count("notice -> requeue") == 2 and "completed" in table
    mine = json.loads(slurmpre_cli("status", "--json", check=True).stdout)
    assert any(r["job"] == job and r["attempts"] == 3 for r in mine)

    # prune: keeps the newest complete checkpoint, frees the older ones
    before = sorted(p.name for p in (tmp_path / "ckpt").glob("step-*"))
    pruned = json.loads(
        slurmpre_cli(
            "ckpt", "prune", str(tmp_path / "ckpt"), "--keep", "1", "--json", check=True
        ).stdout
    )
    after = sorted(p.name for p in (tmp_path / "ckpt").glob("step-*"))
    assert after == before[-1:] and len(pruned["removed"]) == len(before) - 1
