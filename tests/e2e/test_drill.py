"""`slurmpre drill` on the sandbox: the promise kept under random preemptions, and the
seeds' recipe beside it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from slurmpre.folder.checkpoints import judge
from slurmpre.sandbox.cluster import Sandbox

pytestmark = pytest.mark.sandbox

SUMMARY_KEYS = {
    "state",
    "attempts",
    "preemptions",
    "steps",
    "steps_lost",
    "steps_computed",
    "wall_s",
    "uninterrupted_wall_s",
    "wall_ratio",
    "goodput",
    "mean_drain_to_first_step_s",
    "mean_capacity_wait_s",
    "mean_own_latency_s",
    "training_lost_per_preemption_s",
    "node_seconds",
    "cost_preemptible",
    "cost_on_demand_uninterrupted",
    "partial_checkpoint_loaded",
    "mode",
    "job_id",
}


def drill(
    workdir: Path, *args: str, seed: int, timeout: float = 1500
) -> tuple[dict[str, Any], str]:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "slurmpre",
            "drill",
            "--json",
            "--seed",
            str(seed),
            "--workdir",
            str(workdir),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, f"drill exited {proc.returncode}\n{proc.stderr[-8000:]}"
    return json.loads(proc.stdout), proc.stderr


def check_promise(doc: dict[str, Any], preemptions: int) -> None:
    run = doc["runs"]["slurmpre"]
    summary = run["summary"]
    assert set(summary) == SUMMARY_KEYS
    assert doc["failures"] == []
    assert doc["identical_weights"] == {
        "slurmpre": True,
        "reference": True,
        **({"seeds": doc["identical_weights"]["seeds"]} if "seeds" in doc["runs"] else {}),
        **({"capacity": True} if "capacity" in doc["runs"] else {}),
        **({"big-state": True} if "big-state" in doc["runs"] else {}),
    }
    if "big-state" in doc["runs"]:  # saved on the node, pulled from it, flushed behind
        (scene,) = doc["runs"]["big-state"]["preemptions"]
        assert scene["steps_lost"] == 0 and scene["pull_mb"] >= 32, scene
        assert all(scene[k] is not None for k in ("saved_on_node_s", "pull_s", "flush_s")), scene
    if "capacity" in doc["runs"]:  # the capacity scene: it grew back when its node returned
        grown = doc["capacity"]["resizes"]
        assert [(r["kind"], r["nodes_from"], r["nodes_to"]) for r in grown] == [("grow", 1, 2)]
        assert doc["runs"]["capacity"]["summary"]["steps_lost"] == 0
    assert summary["state"] == "COMPLETED" and summary["steps"] == doc["steps"]
    assert summary["preemptions"] == preemptions and summary["steps_lost"] == 0
    assert not summary["partial_checkpoint_loaded"]
    # A completed run has every figure (a missing one is a bug in the report, #40).
    assert all(v is not None for v in summary.values()), summary
    for p in run["preemptions"]:
        figures = ("steps_lost", "without_training_s", "drain_to_first_step_s", "capacity_wait_s")
        assert all(p[k] is not None for k in figures), p
    moments = [p["moment"] for p in run["preemptions"]]
    assert sorted(moments) == sorted(m["moment"] for m in doc["schedule"])
    assert all(p["steps_lost"] == 0 and p["notice_seen_s"] is not None for p in run["preemptions"])
    folder = Path(doc["workdir"]) / "slurmpre"
    for attempt in run["attempts"]:
        # every attempt's own log is kept, and it resumed from a complete checkpoint
        job, own = attempt["job"], attempt["job_attempt"]  # a successor is a job of its own
        log = folder / "logs" / f"drill-{job}.attempt-{own}.out"
        assert log.is_file() and log.read_text(), log
        if attempt["resume_path"] is not None:
            assert judge(attempt["resume_path"]).complete, attempt


def test_random_preemptions_lose_nothing_and_beat_the_seeds_recipe(
    sandbox: Sandbox, tmp_path: Path, seed: int
) -> None:
    """The chaos test, CI's variant: random preemptions across one training run (start-up
    and mid-checkpoint among them) end bit-identical, with zero steps lost, no partial
    checkpoint ever loaded and every attempt's log kept; the seeds' recipe, preempted at
    the same moments, sees nothing and is slower from drain to its next step. CI runs 3
    (SLURMPRE_CHAOS_PREEMPTIONS sets it; docs/drill.md gives the long run of 10). The
    window is 15 s (the provider's is 300): with the suite's clusters side by side on two
    cores, a notice checkpoint took 6 s and a 10 s window killed the predecessor before
    its last save (2 steps lost, seed 330547121)."""
    count = int(os.environ.get("SLURMPRE_CHAOS_PREEMPTIONS", "3"))
    doc, err = drill(
        tmp_path, "--preemptions", str(count), "--baseline", "--window", "15",
        "--checkpoint-interval", "40", "--tuned-timings", "--big-state-mb", "32",
        seed=seed,
    )  # fmt: skip
    try:
        check_promise(doc, count)
        # The runs side by side, as one page in the drill's folder (#53).
        shown = (Path(doc["workdir"]) / "timeline.html").read_text()
        assert "<h2>slurmpre</h2>" in shown and "<h2>the seeds&#x27; recipe" in shown
        seeds = doc["runs"]["seeds"]["summary"]
        assert seeds["preemptions"] == count
        # The recipe trains on through the window and is killed at its end; slurmpre
        # requeues itself inside the window, every time. (Means of drain -> first step
        # are not compared: with 3 preemptions, two back to back can make slurmpre's
        # mean as long as the recipe's; the drill's table shows them.)
        assert seeds["mean_drain_to_first_step_s"] > doc["window_s"]
        window = doc["window_s"]
        ours_requeue = [p["requeue_s"] for p in doc["runs"]["slurmpre"]["preemptions"]]
        assert all(r is not None and r < window for r in ours_requeue), ours_requeue
        seeds_kill = [p["requeue_s"] for p in doc["runs"]["seeds"]["preemptions"]]
        assert all(k is None or k >= window - 1 for k in seeds_kill), seeds_kill
        # The recipe loses steps only when its kill comes before its next periodic
        # save; drained just after a save, it can reach the next one inside the window
        # (CI's stop 18 saw exactly that). So the sound claim is "never better".
        ours = doc["runs"]["slurmpre"]["summary"]
        assert seeds["steps_computed"] >= ours["steps_computed"]
        assert "seeds (job" in err and "x better" in err
        assert "capacity scene (job" in err and "grow at +" in err
        assert "big-state scene (job" in err and "pulled 32 MB in" in err
    except AssertionError as exc:
        # The drill's own timeline and table say what happened: keep them with the failure.
        raise AssertionError(f"{exc}\n--- the drill's report ---\n{err[-8000:]}") from None
