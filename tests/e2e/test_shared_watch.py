"""End to end (#26 item 1): a user's jobs share one Slurm poll of their nodes, and a drain
of a node that runs two of them gives each its notice within the poll interval + 2 s."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from slurmpre.drill.driver import read_jsonl
from slurmpre.folder.layout import FolderLayout
from slurmpre.job.watch.drainboard import GRACE, LEASE_INTERVALS, READ_EVERY
from slurmpre.login.render import render
from slurmpre.login.spec import validate
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.sandbox.preempt import remove_node
from slurmpre.slurm.client import CommandLineSlurm

from tests.conftest import wait_for, wait_preemptible_idle
from tests.e2e.helpers import restore_all

pytestmark = [pytest.mark.sandbox, pytest.mark.e2e]

POLL = 3.0
LISTEN = """
import json, time, slurmpre
step = 0
while not slurmpre.preemption_requested():
    time.sleep(0.2)
    step += 1
with slurmpre.checkpoint(step) as path:
    (path / "state.json").write_text(json.dumps({"step": step}))
"""


def ledger(folder: Path) -> list[dict[str, Any]]:
    """The folder's ledger records as written so far (a line being written is skipped)."""
    return read_jsonl(FolderLayout(folder).ledger)


def read_json(path: Path) -> Any:
    """The file's JSON, or None while it is not there (a lease between holders)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def listener(slurm: CommandLineSlurm, folder: Path, name: str, board: Path, cpus: int) -> str:
    """Submit a one-node job that listens for its notice (LISTEN), sharing ``board``."""
    spec = validate(
        {
            "name": name,
            "command": [sys.executable, "-c", LISTEN],
            "launcher": "plain",
            "cpus_per_task": cpus,
            "checkpoint_dir": str(folder),
            "poll_interval": POLL,
            "requeue": False,
            "env": {"SLURMPRE_SHARED_DIR": str(board)},
        }
    )
    (folder / "logs").mkdir(parents=True)
    return slurm.submit(render(spec))


def attempt_logs(folder: Path) -> str:
    return "".join(p.read_text() for p in (folder / "logs").glob("*.attempt-*.out"))


def test_three_jobs_poll_slurm_as_one_and_a_drain_reaches_both_on_the_node(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    slurm = CommandLineSlurm()
    wait_preemptible_idle(slurm)
    board = tmp_path / "board"
    folders = [tmp_path / f"job-{i}" for i in range(3)]
    ids = [
        listener(slurm, folder, f"shared-{i}", board, cpus=1) for i, folder in enumerate(folders)
    ]
    try:
        wait_for("three jobs running", lambda: all(slurm.job(j).state == "RUNNING" for j in ids),
                 timeout=120)  # fmt: skip
        nodes = {j: slurm.job(j).nodes[0] for j in ids}
        wait_for(
            "the board naming every job's node",
            lambda: (
                (board / "board.json").exists()
                and set(nodes.values())
                <= set(json.loads((board / "board.json").read_text())["asked"])
            ),
            timeout=60,
        )
        # Polls enough to tell one poller from three: a lease's length of the board's
        # polls (one per POLL while one job polls for all), waited for, not slept through.
        # A holder that did not renew would have lost the lease to another job, which
        # says so in its log, within that.
        polls: set[float] = set()

        def a_lease_of_polls() -> bool:
            latest = read_json(board / "board.json")
            if latest is not None:
                polls.add(latest["polled_at"])
            return len(polls) > LEASE_INTERVALS  # the one seen first, then a lease's worth

        wait_for(f"{LEASE_INTERVALS} more polls of the board", a_lease_of_polls, timeout=60)
        logs = [attempt_logs(f) for f in folders]
        pollers = [i for i, text in enumerate(logs) if "this job polls Slurm for its user" in text]
        assert len(pollers) == 1, logs
        lease = json.loads((board / "lease.json").read_text())
        assert lease["holder"] == ids[pollers[0]]
        # the drain: the node running two of them (2 cores a node, one core a job)
        crowded = max(set(nodes.values()), key=lambda n: list(nodes.values()).count(n))
        hit = [i for i, j in enumerate(ids) if nodes[j] == crowded]
        assert len(hit) == 2, nodes
        t0 = time.time()
        slurm.update_node(crowded, state="DRAIN", reason="preempted")
        for i in hit:
            found = wait_for(
                f"job {ids[i]}'s notice and its checkpoint",
                lambda i=i: (
                    (recs := ledger(folders[i]))
                    and any(r["event"] == "checkpoint" for r in recs)
                    and next(r for r in recs if r["event"] == "notice")
                ),
                timeout=60,
            )
            assert found["seen_at"] - t0 <= POLL + 2, (ids[i], found["seen_at"] - t0)
        for i in hit:
            wait_for(f"job {ids[i]} to end", lambda i=i: slurm.job(ids[i]).finished, timeout=60)
        ended = "".join(p.read_text() for i in hit for p in (folders[i] / "logs").glob("*.out"))
        assert "answers read from the board" in ended
    finally:
        for j in ids:
            slurm.cancel(j)
        restore_all(sandbox)


def test_when_the_pollers_node_goes_the_lease_passes_on_within_an_interval(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """The job polling for both is killed with its node (no lease released, as when the
    provider removes a node): the other job holds the lease within an interval (+ a read
    and the grace) of the dead poller's last poll, and a drain of its own node then
    reaches it within the interval + 2 s. (A drain before the hand-over, while the board
    lags: tests/job/test_drainboard.py.)"""
    slurm = CommandLineSlurm()
    wait_preemptible_idle(slurm)
    board = tmp_path / "board"
    folders = [tmp_path / f"job-{i}" for i in range(2)]
    ids = [  # a node each
        listener(slurm, folder, f"poller-{i}", board, cpus=2) for i, folder in enumerate(folders)
    ]
    try:
        wait_for("two jobs running", lambda: all(slurm.job(j).state == "RUNNING" for j in ids),
                 timeout=120)  # fmt: skip
        nodes = [slurm.job(j).nodes[0] for j in ids]
        assert nodes[0] != nodes[1], nodes
        wait_for(
            "the board naming both jobs' nodes",
            lambda: (d := read_json(board / "board.json")) and set(nodes) <= set(d["asked"]),
            timeout=60,
        )
        poller = ids.index(read_json(board / "lease.json")["holder"])
        other = 1 - poller
        remove_node(sandbox, nodes[poller])
        slurm.update_node(nodes[poller], state="DOWN", reason="preempted: node removed")
        last_poll = read_json(board / "board.json")["polled_at"]  # the dead poller's last
        lease = wait_for(
            "the lease to pass on",
            lambda: (d := read_json(board / "lease.json")) and d["holder"] == ids[other] and d,
            timeout=60,
        )
        assert lease["at"] - last_poll <= POLL + GRACE + READ_EVERY + 1, lease["at"] - last_poll
        t0 = time.time()
        slurm.update_node(nodes[other], state="DRAIN", reason="preempted")
        found = wait_for(
            f"job {ids[other]}'s notice and its checkpoint",
            lambda: (
                (recs := ledger(folders[other]))
                and any(r["event"] == "checkpoint" for r in recs)
                and next(r for r in recs if r["event"] == "notice")
            ),
            timeout=60,
        )
        assert found["seen_at"] - t0 <= POLL + 2, found["seen_at"] - t0
    finally:
        for j in ids:
            slurm.cancel(j)
        restore_all(sandbox)
