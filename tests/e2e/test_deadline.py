"""End to end (#37): a run with a deadline whose preemptible capacity is gone for longer
than its slack moves to the standard node and finishes in time; without a deadline,
`fallback_after` moves it at once. On the real sandbox: the job's preemptible node is
preempted the provider's way and the other one drained (no capacity left), and the
standard node (`gpu-dp-1`) is the one a job without the `preemptible` feature can use."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.sandbox.preempt import PreemptPlan
from slurmpre.slurm.client import CommandLineSlurm

from tests.conftest import PREEMPTIBLE, STANDARD, slurmpre_cli, wait_for, wait_preemptible_idle
from tests.e2e.helpers import Preemption, jsonl, ledger, logs, restore_all, write_spec

pytestmark = [pytest.mark.sandbox, pytest.mark.e2e]

STEPS = 60
# Steps trained before the preemption. The twin's `--begin` is the first point of the
# policy's 30 s grid after the hand-over (`placing.switch_at`) where the waiting run is
# behind the line (step 60 t / 360 s with a 6 m deadline) or its slack is spent. At the
# hand-over the run is ahead of the line either way (about step 2 then); with 5 steps
# before the drain it stands near step 7-9 and is behind from 42-54 s, so its twin starts
# 60 s after the hand-over; with 10 (steps 12-14, behind from 72-84 s) it was often 90.
BEFORE = 5
# Fallback at the hand-over needs no long run: what is left trains on the standard node.
FALLBACK_STEPS = 30
TRAIN = """\
import json, os, sys, time
import slurmpre

log = sys.argv[1]
start = 0
if slurmpre.resume_path() is not None:
    start = slurmpre.resume_step()
for step in range(start, {steps}):
    if slurmpre.preemption_requested():
        with slurmpre.checkpoint(step) as path:
            (path / "step").write_text(str(step))
        break
    if {every} and step and step % {every} == 0 and step != start:
        with slurmpre.checkpoint(step) as path:  # periodic: the ledger sees the progress
            (path / "step").write_text(str(step))
    time.sleep(0.5)
    with open(log, "a") as f:
        f.write(json.dumps({{"step": step, "node": os.environ["SLURMD_NODENAME"]}}) + "\\n")
"""


def take_capacity_away(
    sandbox: Sandbox, tmp_path: Path, name: str, keys: list[str], *, steps: int, every: int = 0
) -> tuple[Path, Preemption]:
    """Submit a run of ``steps`` steps, let it train, then preempt its node the provider's
    way with the other preemptible node drained: no preemptible capacity is left. The
    steps file and the preemption under way."""
    slurm = CommandLineSlurm()
    wait_preemptible_idle(slurm)
    train = tmp_path / "train.py"
    train.write_text(TRAIN.format(steps=steps, every=every))
    log = tmp_path / "steps.jsonl"
    spec = write_spec(
        tmp_path, name, [sys.executable, str(train), str(log)],
        ['launcher = "plain"', 'restart = "successor"', "poll_interval = 1",
         f"total_steps = {steps}", *keys],
        nodes="1",
    )  # fmt: skip
    first = slurmpre_cli("submit", str(spec), check=True).stdout.strip()
    wait_for(f"{BEFORE} steps", lambda: len(jsonl(log)) >= BEFORE, timeout=120)
    (victim,) = slurm.job(first).nodes
    other = next(n for n in PREEMPTIBLE if n != victim)
    slurm.update_node(other, state="DRAIN", reason="capacity gone")  # no capacity left
    preemption = Preemption(sandbox, PreemptPlan(victim, window=20, once_empty=True))
    preemption.start()
    return log, preemption


def finished(log: Path, steps: int) -> bool:
    done = jsonl(log)
    return bool(done) and done[-1]["step"] == steps - 1


def run_scene(
    sandbox: Sandbox, tmp_path: Path, name: str, keys: list[str], steps: int = STEPS
) -> list[dict]:
    """No preemptible capacity from the first notice to the end; the steps it trained
    (and where), in order."""
    log, preemption = take_capacity_away(sandbox, tmp_path, name, keys, steps=steps)
    try:
        wait_for("the run to finish", lambda: finished(log, steps), timeout=420)
        preemption.finish()
    finally:
        restore_all(sandbox)
    return jsonl(log)


def test_a_deadline_moves_a_run_with_no_capacity_to_standard_nodes_in_time(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """Ahead of the line at the hand-over, the run waits on preemptible nodes with a held
    twin on the standard node, which starts once waiting would miss the line, claims the
    hand-over and finishes by the deadline (BEFORE only moves that moment sooner)."""
    submitted = time.time()
    trained = run_scene(sandbox, tmp_path, "deadline", ['deadline = "6m"'])
    finished = time.time()
    where = logs(tmp_path)[-3000:]
    assert [t["step"] for t in trained] == list(range(STEPS)), where  # no step lost or twice
    assert trained[0]["node"] in PREEMPTIBLE and trained[-1]["node"] == STANDARD[0], where
    assert finished - submitted < 360, where  # by the deadline
    recs = ledger(tmp_path)
    (placed,) = [r for r in recs if r["event"] == "placed"]
    # At the hand-over the run was ahead of the line: its successor waits on preemptible
    # nodes, and a twin on the standard node is held until waiting would miss the line.
    assert placed["where"] == "preemptible" and placed["twin"], placed
    assert placed["deadline_at"] == pytest.approx(submitted + 360, abs=15)
    claimed = [r for r in recs if r["event"] == "claimed"]
    assert [c["job"] for c in claimed] == [placed["twin"]]
    status = json.loads(slurmpre_cli("status", recs[0]["job"], "--json", check=True).stdout)
    assert [a["on"] for a in status["attempts"]] == ["preemptible", "standard"]
    assert status["standard_node_hours"] > 0


def test_without_a_deadline_fallback_after_moves_the_run_at_the_hand_over(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """Still proves the move at the first hand-over with no step lost: no clock of the
    policy is involved, so FALLBACK_STEPS (not STEPS) is enough for it."""
    trained = run_scene(sandbox, tmp_path, "fallback", ["fallback_after = 1"], FALLBACK_STEPS)
    where = logs(tmp_path)[-3000:]
    assert [t["step"] for t in trained] == list(range(FALLBACK_STEPS)), where
    assert trained[-1]["node"] == STANDARD[0], where
    (placed,) = [r for r in ledger(tmp_path) if r["event"] == "placed"]
    assert placed["where"] == "standard" and "fallback_after = 1" in placed["why"]
    assert not placed["twin"]


# Long enough that the run still trains on the standard node when the watcher's placement
# notice comes (its twin starts about 30 s after the hand-over, near step 10; the return
# source asks every 12 s at poll_interval = 1; the notice comes near step 60-80, the hand-
# over back some seconds later), with 25 s or more to spare; the steps after it prove
# nothing more (was 200: a minute of training on preemptible nodes after the return).
RETURN_STEPS = 140


def test_on_standard_nodes_a_deadline_run_goes_back_when_preemptible_nodes_return(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """Preempted with no capacity left, the run waits `max_wait`, then its twin trains on
    the standard node; the preemptible nodes return, and with the deadline far, the
    watcher's placement notice hands the run back to them."""
    steps, preemption = take_capacity_away(
        sandbox, tmp_path, "back", ['deadline = "20m"', 'max_wait = "20s"'],
        steps=RETURN_STEPS, every=10,
    )  # fmt: skip
    try:
        wait_for(
            "training on the standard node",
            lambda: any(t["node"] == STANDARD[0] for t in jsonl(steps)),
            timeout=180,
        )
        preemption.finish()
        restore_all(sandbox)  # capacity returns
        wait_for("the run to finish", lambda: finished(steps, RETURN_STEPS), timeout=420)
    finally:
        restore_all(sandbox)
    where = logs(tmp_path)[-4000:]
    trained = jsonl(steps)
    assert [t["step"] for t in trained] == list(range(RETURN_STEPS)), where
    kinds = ["standard" if t["node"] == STANDARD[0] else "preemptible" for t in trained]
    runs = [k for i, k in enumerate(kinds) if i == 0 or kinds[i - 1] != k]
    assert runs == ["preemptible", "standard", "preemptible"], where
    placed = [r for r in ledger(tmp_path) if r["event"] == "placed"]
    assert [p["where"] for p in placed][-1] == "preemptible", placed
    notices = [r for r in ledger(tmp_path) if r["event"] == "notice"]
    assert [n["kind"] for n in notices] == ["drain", "placement"], notices
