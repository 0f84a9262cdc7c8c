"""End to end (#36): grow back. A job asked for ``nodes = "1-2"`` starts on the one
preemptible node that is free; a node that comes back for less than the settle time is
not chased; once the other has stayed idle for it, the job hands over to a 2-node
successor, which resumes from its checkpoint on both nodes (world 1 -> 2), loses no
step, and ends bit for bit as an uninterrupted run (the tiny trainer's sum runs over
its shards in one order whatever the world size).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from slurmpre.job.watch.drainboard import GRACE, READ_EVERY
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.slurm.client import CommandLineSlurm

from tests.conftest import PREEMPTIBLE, wait_for, wait_preemptible_idle
from tests.e2e.helpers import (
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

SETTLE = 8
POLL = 1  # the spec's poll_interval: the drain board's holder polls Slurm this often
# The grow source reads the board every 2 * READ_EVERY (slurmpre/job/start/run.py), and a
# board serves while it is at most POLL + GRACE old: after a drain, the source can go on
# seeing the node idle this long, and no longer (two of its reads, as a margin).
STALE_VIEW = POLL + GRACE + 2 * (2 * READ_EVERY)


def test_a_job_on_fewer_nodes_than_its_range_grows_back_and_loses_nothing(
    sandbox: Sandbox, baseline: Any, tmp_path: Path
) -> None:
    slurm = CommandLineSlurm()
    wait_preemptible_idle(slurm)
    spare = PREEMPTIBLE[1]
    slurm.update_node(spare, state="DRAIN", reason="not yet back")
    try:
        job = submit(
            tmp_path,
            nodes="1-2",
            extra=["--honor-notice", "--hold-at", "12"],
            spec_lines=['restart = "successor"', "poll_interval = 1", f"grow_settle = {SETTLE}"],
        )
        wait_for("step 12", (tmp_path / "ckpt" / "holding").exists, timeout=120)
        assert slurm.job(job).nodes == (PREEMPTIBLE[0],)
        # Back for less than the settle time, then taken again: not chased.
        slurm.update_node(spare, state="RESUME")
        wait_for("the node idle", lambda: slurm.nodes([spare])[0].state == "IDLE", timeout=30)
        # Not a wait: how long the node is back, the scene's premise. Shorter than the
        # settle time, longer than a board poll and a read (POLL + 2 * READ_EVERY = 3 s):
        # the source has seen it idle.
        time.sleep(SETTLE / 2)
        slurm.update_node(spare, state="DRAIN", reason="taken again")
        # A negative check, so a fixed window: the source can decide a grow only while it
        # sees the node idle, i.e. before the drain plus STALE_VIEW (a decision is its
        # ledger notice at once); the settle time runs from the resume, inside that. A
        # grow that chased the node (settle ignored or counted from the wrong moment)
        # would be in the ledger by now; none is.
        time.sleep(STALE_VIEW)
        assert not any(r["event"] == "notice" for r in ledger(tmp_path))
        assert slurm.job(job).nodes == (PREEMPTIBLE[0],)
        # Back for good: after the settle time the job hands over to a 2-node job.
        slurm.update_node(spare, state="RESUME")
        bigger = wait_for("the grow", lambda: _successor(tmp_path), timeout=120)
        wait_done(slurm, bigger, tmp_path, timeout=300)
    finally:
        restore_all(sandbox)  # the spare resumed, should it still be drained
    records = ledger(tmp_path)
    notice = next(r for r in records if r["event"] == "notice")
    assert (notice["kind"], notice["nodes"], notice["grow_to"]) == ("grow", 1, 2)
    handed = [r for r in records if r["event"] == "successor"]
    assert handed[0]["successor"] == bigger and len(handed) == 2  # and its twin
    twin = handed[1]["successor"]
    assert slurm.job(twin).finished  # cancelled when the bigger job claimed the hand-over
    starts = [r for r in records if r["event"] == "start"]
    assert [s["job"] for s in starts] == [job, bigger]
    assert sorted(starts[1]["nodes"]) == sorted(PREEMPTIBLE)
    runs = progress(tmp_path)
    assert [(r["world"], r["previous_world"]) for r in runs] == [(1, None), (2, 1)]
    (seen,) = notices(tmp_path)
    assert runs[1]["resumed_step"] == seen["step"] >= 12  # zero steps lost
    assert same_weights(final_weights(tmp_path), baseline)
    predecessor = slurm.job(job)
    assert predecessor.state == "COMPLETED" and predecessor.restarts == 0


def _successor(folder: Path) -> str | None:
    found = [r["successor"] for r in ledger(folder) if r["event"] == "successor"]
    return str(found[0]) if found else None
