"""The drill's big-state scene and the tier's figures in its report (#51): the save on
the node, the pull and the flush of each preemption's notice save, and what fails it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from slurmpre.drill import big_state, report
from slurmpre.drill.options import DrillOptions, DrillResult
from slurmpre.drill.plan import Moment
from slurmpre.drill.table import render, timeline_lines
from slurmpre.drill.timeline import Observed
from slurmpre.errors import UsageError
from slurmpre.folder import records

from tests.drill.test_report import reference_run, slurmpre_run


def tiered_run(*, pulled_it: bool = True) -> Observed:
    """`slurmpre_run`, saving on the node: attempt 0's notice save of step 30 took 0.4 s
    there; attempt 1 (job 7, a successor) pulled it from both nodes, and flushed it."""
    run = slurmpre_run()
    run.mode = big_state.NAME

    def saved(job: str, step: int, seconds: float, notice: bool) -> records.Saved:
        return records.Saved(job=job, attempt=0, step=step, path=f"/l/{step}", seconds=seconds,
                             after_notice=notice, time=130.0)  # fmt: skip

    def pulled(node: int, step: int, seconds: float, size: int) -> records.Pulled:
        return records.Pulled(job="7", attempt=0, node=node, step=step, ok=True,
                              seconds=seconds, bytes=size, time=140.0)  # fmt: skip

    extra: list[records.Record] = [
        saved("5", 20, 0.3, False),
        saved("5", 30, 0.4, True),
        saved("4", 30, 9.0, True),
    ]
    if pulled_it:
        extra += [pulled(0, 30, 1.5, 600_000_000), pulled(1, 30, 2.5, 400_000_000),
                  pulled(1, 20, 9.0, 10**9),  # another step's
                  records.PullDone(job="7", attempt=0, predecessor="5", step=30, ok=True,
                                   time=141.0)]  # fmt: skip
        # Another attempt's pull of it, which failed: none of its figures.
        extra += [records.Pulled(job="9", attempt=0, node=0, step=30, ok=True, seconds=7.0,
                                 bytes=5, time=150.0),
                  records.PullDone(job="9", attempt=0, predecessor="5", step=30, ok=False,
                                   why="node 1: cut", time=151.0)]  # fmt: skip
    flush = records.Checkpoint(job="7", attempt=0, step=30, path="/c/30", after_notice=True,
                               time=200.0, seconds=0.4, flush_seconds=62.0)  # fmt: skip
    extra.append(flush)
    run.ledger = [*run.ledger, *(r.to_json() for r in extra)]
    return run


def test_each_preemption_shows_its_save_on_the_node_its_pull_and_its_flush() -> None:
    (p,) = report.preemptions(tiered_run())
    assert (p.saved_on_node_s, p.pull_s, p.pull_mb, p.flush_s) == (0.4, 2.5, 1000.0, 62.0)
    assert p.tier_line() == (
        "saved on the node in 0.4 s, pulled 1,000 MB in 2.5 s, flushed into the folder in 62.0 s"
    )
    # A run that saves straight into its folder has none of them, and no such line.
    (plain,) = report.preemptions(slurmpre_run())
    assert (plain.saved_on_node_s, plain.pull_s, plain.flush_s) == (None, None, None)
    assert not any("saved on the node" in line for line in timeline_lines(slurmpre_run()))
    assert any("saved on the node in 0.4 s" in line for line in timeline_lines(tiered_run()))


def result(run: Observed, *, identical: bool = True) -> DrillResult:
    scene = replace(run, mode=big_state.NAME)
    return DrillResult(
        seed=5,
        options=DrillOptions(preemptions=1, big_state_mb=64),
        timings="tuned",
        schedule=[Moment("training", 10)],
        runs={"slurmpre": slurmpre_run(), "reference": reference_run(), big_state.NAME: scene},
        identical={"slurmpre": True, "reference": True, big_state.NAME: identical},
        workdir=Path("/w"),
    )


def test_the_scene_passes_when_the_notice_save_was_pulled_and_nothing_lost() -> None:
    kept = result(tiered_run())
    assert kept.failures() == []
    text = render(kept)
    scene = text[text.index(next(t for t in text if t.startswith("big-state scene"))) :]
    assert scene[0].startswith("big-state scene (job 5; 64 MB of state saved on the node")
    assert "1 periodic save(s) on the node stopped the training 0.30 s at most" in scene[1]
    assert "step 30 saved on the node in 0.4 s, pulled 1,000 MB in 2.5 s" in scene[2]
    assert "0 steps lost" in scene[2]
    assert scene[3] == "  step 30 flushed into the folder in 62.0 s"
    doc = json.loads(json.dumps(kept.as_dict()))
    assert doc["runs"][big_state.NAME]["preemptions"][0]["pull_s"] == 2.5


def test_the_scene_fails_without_the_pull_with_a_step_lost_or_another_state() -> None:
    unpulled = result(tiered_run(pulled_it=False)).failures()
    assert unpulled == ["the big-state scene's notice save was not pulled from the drained node"]
    lost = tiered_run()
    lost.log = [{**e, "resumed_step": 25} if e["event"] == "begin" and e["attempt"] == 1 else e
                for e in lost.log]  # fmt: skip
    assert "the big-state scene lost 5 steps" in result(lost).failures()
    assert result(tiered_run(), identical=False).failures() == [
        "the big-state scene's final state differs from the uninterrupted run's"
    ]
    failed = tiered_run()
    failed.state = "FAILED"
    assert "the big-state scene's job ended FAILED" in result(failed).failures()
    undrained = tiered_run()
    undrained.hits = []
    assert result(undrained).failures() == [
        "the big-state scene made no preemption (its training ended first)"
    ]


def test_the_scene_is_four_intervals_and_a_save_in_its_folder_outlasts_the_window() -> None:
    opts = DrillOptions(window=60, big_state_mb=512, every=500)
    assert (
        big_state.scene_options(opts).training_steps() == 400
        and big_state.scene_options(opts).every == 100
    )
    assert 512 / opts.big_state_mbps() == pytest.approx(90)
    with pytest.raises(UsageError, match=r"--big-state-mb 16 in a 3600 s window caps .* 0\.00296"):
        DrillOptions(big_state_mb=16, window=3600).check()
    assert big_state.scene_options(DrillOptions(every=40)).training_steps() == 160
    with pytest.raises(UsageError, match=r"--big-state-mb must be 0 .* got 8"):
        DrillOptions(big_state_mb=8).check()
    DrillOptions(big_state_mb=0).check()


def test_the_big_state_is_checked_row_by_row() -> None:
    torch = pytest.importorskip("torch")
    from slurmpre.drill.train import ROWS, big_state_rows, seen_rows
    from slurmpre.drill.train import big_state as payload_of

    payload = payload_of(torch, 1)
    for step in range(150):
        payload[step % ROWS].add_(1.0)
    assert seen_rows(payload) == big_state_rows(150)
    assert big_state_rows(150)[:3] == [3.0, 3.0, 3.0] and big_state_rows(150)[-1] == 2.0
    payload[5, 7] += 1.0  # one element torn
    assert seen_rows(payload) is None


def test_the_scenes_shared_dir_is_one_the_sandbox_takes() -> None:
    """`up --shared-dir` refuses a folder inside the sandboxes' state (/var/lib/slurmpre):
    the scene's folder lay there once, and every drill stopped at its start (CI run)."""
    from slurmpre.sandbox import shared_fs
    from slurmpre.sandbox.instance import Instance

    box = Instance(9)
    shared = big_state.SHARED / f"sandbox{box.number}"
    assert shared_fs.checked(str(shared), 5.0, box.state_dir, box) is not None
