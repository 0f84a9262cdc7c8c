"""End to end: a run that cannot progress stops restarting. A job whose script never
saves is drained: its successor finds one attempt that committed nothing before it
(max_stalled_restarts = 1), records why, is made non-requeueable and ends FAILED, and
`slurmpre status` says so on one line; nothing of the run is left in the queue."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.sandbox.preempt import PreemptPlan
from slurmpre.slurm.client import CommandLineSlurm

from tests.conftest import slurmpre_cli, wait_for, wait_preemptible_idle
from tests.e2e.helpers import Preemption, ledger, logs, restore_all, successor_of, write_spec

pytestmark = [pytest.mark.sandbox, pytest.mark.e2e]


def test_a_run_whose_attempts_save_nothing_gives_up_after_a_preemption(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    slurm = CommandLineSlurm()
    wait_preemptible_idle(slurm)
    started = tmp_path / "started"
    never_saves = f"open({str(started)!r}, 'a').write('x'); import time; time.sleep(600)"
    spec = write_spec(
        tmp_path,
        "stuck",
        ["python3", "-c", never_saves],
        ['launcher = "plain"', 'restart = "successor"', "poll_interval = 1",
         "preempt_window = 15", "safety_margin = 5", "max_stalled_restarts = 1"],
        nodes="1",
    )  # fmt: skip
    first = slurmpre_cli("submit", str(spec), check=True).stdout.strip()
    wait_for("the script to start", started.exists, timeout=120)
    (victim,) = slurm.job(first).nodes
    preemption = Preemption(
        sandbox, PreemptPlan(victim, window=15, return_after=3, once_empty=True)
    )
    preemption.start()
    try:
        successor = wait_for("the hand-over", lambda: successor_of(tmp_path), timeout=90)
        wait_for(f"job {successor} to end", lambda: slurm.job(successor).finished, timeout=180)
        preemption.finish()
    finally:
        restore_all(sandbox)
    where = logs(tmp_path)[-4000:]
    ended = slurm.job(successor)
    assert ended.state == "FAILED" and not ended.requeue, where
    (gave_up,) = [r for r in ledger(tmp_path) if r["event"] == "gave_up"]
    assert gave_up["job"] == successor
    assert gave_up["why"].startswith("the last 1 attempts committed no checkpoint"), gave_up
    assert "slurmpre run: error: giving up: the last 1 attempts committed no checkpoint" in where
    assert started.read_text() == "x"  # the successor's training never ran, or was ended
    status = json.loads(slurmpre_cli("status", first, "--json", check=True).stdout)
    assert status["chain"] == [first, successor]
    assert [a["ended"] for a in status["attempts"]][-1] == "gave up"
    text = slurmpre_cli("status", first, check=True).stdout
    assert f"gave up: {gave_up['why']}" in text
    left = [j for j in slurm.jobs() if j.job_id in (first, successor) and not j.finished]
    assert left == []
