"""End to end: restart = "successor" on the sandbox. A one-node job whose node drains,
with another preemptible node free, hands over to a new job instead of being requeued:
it commits its notice checkpoint, the successor (not on the draining node) waits for
it to end, resumes there, and the run ends bit for bit as an uninterrupted one.
"""

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
    submit,
    wait_done,
)

pytest.importorskip("torch", reason="the e2e extra (torch==2.13.0) is not installed")

pytestmark = [pytest.mark.sandbox, pytest.mark.e2e]


def test_a_drained_one_node_job_hands_over_to_a_successor_and_loses_nothing(
    sandbox: Sandbox, baseline: Any, tmp_path: Path
) -> None:
    slurm = CommandLineSlurm()
    wait_preemptible_idle(slurm)
    at_step = 12
    job_id = submit(
        tmp_path,
        nodes="1",
        extra=["--honor-notice", "--hold-at", str(at_step)],
        spec_lines=['restart = "successor"', "poll_interval = 1"],
    )
    wait_for(f"step {at_step}", (tmp_path / "ckpt" / "holding").exists, timeout=120)
    victim = slurm.job(job_id).nodes[0]
    preemption = Preemption(
        sandbox, PreemptPlan(victim, window=60, return_after=3, once_empty=True)
    )
    preemption.start()
    try:

        def handed() -> str | None:
            found = [r for r in ledger(tmp_path) if r["event"] == "successor"]
            return found[0]["successor"] if found else None

        successor = str(wait_for("the hand-over to a successor", handed, timeout=90))
        wait_done(slurm, successor, tmp_path, timeout=240)
        events = preemption.finish()
    finally:
        restore_all(sandbox, slurm)
    drained_at = events[0].at
    predecessor = slurm.job(job_id)
    # Ended, not requeued: it could not be (Requeue=0 before the hand-over).
    assert predecessor.state == "COMPLETED" and predecessor.restarts == 0
    assert not predecessor.requeue
    (seen,) = notices(tmp_path)
    runs = progress(tmp_path)
    assert len(runs) == 2 and runs[1]["resumed_step"] == seen["step"]  # zero steps lost
    assert same_weights(final_weights(tmp_path), baseline)
    records = ledger(tmp_path)
    notice = next(r for r in records if r["event"] == "notice")
    hand_over = next(r for r in records if r["event"] == "successor")
    assert hand_over["excluded"] == [victim] and hand_over["job"] == job_id
    starts = [r for r in records if r["event"] == "start"]
    assert [s["job"] for s in starts] == [job_id, successor]
    assert victim not in starts[1]["nodes"]
    # The successor chose its checkpoint only once its predecessor had ended.
    assert starts[1]["time"] >= next(
        r["time"] for r in records if r["event"] == "end" and r["job"] == job_id
    )
    # Nothing of it is left in the queue: no requeued twin, no second successor.
    left = [j for j in slurm.jobs() if j.job_id in (job_id, successor) and not j.finished]
    assert left == []
    print(
        f"drain -> notice {notice['seen_at'] - drained_at:.1f} s; successor {successor} "
        f"submitted {hand_over['submitted_at'] - drained_at:.1f} s after the drain, trained "
        f"again {runs[1]['started_at'] - drained_at:.1f} s after it (tuned timings)"
    )
