"""What makes a drill fail: the promise broken in any one way, each named."""

from __future__ import annotations

import json
from pathlib import Path

from slurmpre.drill.options import DrillOptions, DrillResult
from slurmpre.drill.plan import Moment
from slurmpre.drill.table import render
from slurmpre.drill.timeline import Hit

from tests.drill.test_report import reference_run, slurmpre_run


def result(**changes: object) -> DrillResult:
    run = slurmpre_run()
    for key, value in changes.items():
        setattr(run, key, value)
    return DrillResult(
        seed=5,
        options=DrillOptions(preemptions=1),
        timings="tuned",
        schedule=[Moment("training", 10)],
        runs={"slurmpre": run, "reference": reference_run()},
        identical={"slurmpre": True, "reference": True},
        workdir=Path("/w"),
    )


def test_a_kept_promise_has_no_failure_and_says_so() -> None:
    kept = result()
    assert kept.failures() == []
    assert render(kept)[-1] == "slurmpre kept its promise: zero steps lost, identical weights"
    doc = json.loads(json.dumps(kept.as_dict()))
    assert doc["seed"] == 5 and doc["failures"] == []
    assert doc["runs"]["slurmpre"]["summary"]["steps_lost"] == 0


def test_each_broken_part_is_named() -> None:
    lost = slurmpre_run().log
    lost = [
        {**e, "resumed_step": 25, "resume_path": "/c/step-00000025"}
        if e["event"] == "begin" and e["attempt"] == 1
        else e
        for e in lost
    ]
    failures = result(log=lost, state="FAILED").failures()
    assert "the slurmpre job ended FAILED" in failures
    assert "it lost 5 steps" in failures
    assert "an attempt resumed from a partial checkpoint" in failures
    different = result()
    different.identical["slurmpre"] = False
    assert different.failures() == ["its final weights differ from the uninterrupted run's"]
    assert render(different)[-1].startswith("DRILL FAILED: ")


def test_the_seeds_recipe_is_measured_from_the_kill() -> None:
    seeds = slurmpre_run()
    seeds.mode, seeds.ledger = "seeds", []  # the recipe has no wrapper, so no ledger
    seeds.hits = [Hit("training", 0, "n", drained_at=130.0, removed_at=145.0)]
    seeds.log.insert(-3, {"event": "save-end", "attempt": 0, "t": 120.0, "step": 20})
    r = result()
    r.runs["seeds"] = seeds
    doc = r.as_dict()
    (p,) = doc["runs"]["seeds"]["preemptions"]
    assert p["requeue_s"] == 15.0 and p["notice_seen_s"] is None
    assert r.failures() == []  # the recipe's results never fail the drill


def test_a_successor_called_off_because_the_work_was_done_is_not_the_runs_end() -> None:
    """A drain in the run's last steps: the job finished its work after the notice and
    its watcher cancelled the successor; the run ended as that job did (CI saw the drill
    fail on this with a drain at step 500 of 501)."""
    from slurmpre.drill.driver import run_state

    ended = {"2": "COMPLETED", "3": "CANCELLED"}
    assert run_state(["2", "3"], ended, {"2"}) == "COMPLETED"
    assert run_state(["2", "3"], ended, set()) == "CANCELLED"  # cancelled for another reason
    assert run_state(["2", "3"], {"2": "COMPLETED", "3": "FAILED"}, {"2"}) == "FAILED"
    assert run_state(["2"], {"2": "CANCELLED"}, {"2"}) == "CANCELLED"
