"""Every preemption's cost, overlapping ones included, from recorded timelines alone.

The run of issue #40 (seed 1398317274, Slurm 22.05.8, stock timings) drained both
preemptible nodes within three seconds, the second while the first one's successor
started up on it; the report had no figure for the first preemption and the drill
exited 1. Here: that run rebuilt from its printed table, hundreds of schedules drawn
from seeds (`tests/drill/timelines.py`), and the verdict that only fails where
slurmpre fell short.
"""

from __future__ import annotations

import gzip
import itertools
import os
from pathlib import Path
from typing import Any

import pytest
from slurmpre.drill import report, table, verdict
from slurmpre.drill.options import DrillOptions, DrillResult
from slurmpre.drill.plan import Moment
from slurmpre.drill.timeline import Hit, Observed, Sample
from slurmpre.folder import records

from tests.drill.timelines import generate

DP1, DP2 = "gpu-preemptible-dp-1", "gpu-preemptible-dp-2"
STEP = 0.15


def steps(attempt: int, first: int, last: int, t0: float) -> list[dict[str, Any]]:
    return [
        {"event": "step", "attempt": attempt, "step": s, "t": t0 + (s - first) * STEP}
        for s in range(first, last + 1)
    ]


def begin(attempt: int, t: float, step: int) -> dict[str, Any]:
    path = f"/c/step-{step:08d}" if step else None
    return {"event": "begin", "attempt": attempt, "t": t, "resumed_step": step,
            "resume_path": path, "world": 1}  # fmt: skip


def saved(attempt: int, t: float, step: int, why: str) -> list[dict[str, Any]]:
    return [
        {"event": "save-start", "attempt": attempt, "t": t, "step": step, "why": why},
        {"event": "save-end", "attempt": attempt, "t": t + 1.0, "step": step, "why": why},
    ]


def handed(job: str, seen: float, successor: str, node: str, step: int) -> list[dict[str, Any]]:
    base = {"job": job, "attempt": 0, "time": seen}
    return [
        records.Notice(**base, kind="drain", node=node, reason="preempted", seen_at=seen,
                       first=True).to_json(),
        records.Successor(**base, successor=successor, excluded=(node,), why="notice",
                          submitted_at=seen).to_json(),
        records.Checkpoint(job=job, attempt=0, step=step, path=f"/c/step-{step:08d}",
                           after_notice=True, time=seen + 1).to_json(),
    ]  # fmt: skip


def issue_run() -> Observed:
    """Issue #40's run: dp-1 drained 2.7 s in, while attempt 0 started up; its successor
    (attempt 1, job 3) started on dp-2, which was drained at 5.7 s while that successor
    started up. Attempt 0 trained on to step 267 (its deadline), attempt 1 never trained,
    and attempt 2 (job 4) resumed at 267 on dp-1's replacement, 73.9 s after the second
    drain. The third drain struck attempt 2 mid-checkpoint; attempt 3 finished."""
    t_stop0 = 9.5 + 266 * STEP  # attempt 0's last step, 267
    log = [
        begin(0, 9.4, 0), *saved(0, 10.6, 0, "notice"), *steps(0, 1, 267, 9.5),
        *saved(0, t_stop0 + 0.1, 267, "stop"),
        begin(1, t_stop0 + 1.2, 267),
        begin(2, 79.4, 267), *steps(2, 268, 500, 79.6),
        {"event": "save-start", "attempt": 2, "t": 114.5, "step": 500, "why": "periodic"},
        {"event": "save-end", "attempt": 2, "t": 115.5, "step": 500, "why": "periodic"},
        *saved(2, 116.9, 500, "notice"), *steps(2, 501, 539, 117.9),
        *saved(2, 123.7, 539, "stop"),
        begin(3, 125.5, 539), *steps(3, 540, 1501, 125.6),
        {"event": "done", "attempt": 3, "t": 270.0, "step": 1501},
    ]  # fmt: skip
    ledger = [
        *handed("2", 3.3, "3", DP1, 0),
        *handed("3", 6.4, "4", DP2, 267),
        *handed("4", 116.9, "5", DP1, 539),
    ]
    samples = [
        Sample(0.0, "PENDING", 0, (), "2"), Sample(1.5, "RUNNING", 0, (DP1,), "2"),
        Sample(t_stop0 + 1.5, "COMPLETED", 0, (), "2"),
        Sample(3.3, "PENDING", 1, (), "3"), Sample(4.0, "RUNNING", 1, (DP2,), "3"),
        Sample(65.7, "COMPLETED", 1, (), "3"),
        Sample(6.5, "PENDING", 2, (), "4"), Sample(73.5, "RUNNING", 2, (DP1,), "4"),
        Sample(124.0, "COMPLETED", 2, (), "4"),
        Sample(117.0, "PENDING", 3, (), "5"), Sample(118.5, "RUNNING", 3, (DP2,), "5"),
        Sample(270.5, "COMPLETED", 3, (), "5"),
    ]  # fmt: skip
    hits = [
        Hit("startup", 0, DP1, drained_at=2.7, removed_at=62.7, returned_at=72.7),
        Hit("startup", 1, DP2, drained_at=5.7, removed_at=65.7, returned_at=75.7),
        Hit("checkpoint", 2, DP1, drained_at=115.0, removed_at=175.0, returned_at=185.0),
    ]
    return Observed(
        "slurmpre", "2", 0.0, 270.5, "COMPLETED", log, samples, hits, ledger,
        attempt_ids={0: ("2", 0), 1: ("3", 0), 2: ("4", 0), 3: ("5", 0)},
        jobs=["2", "3", "4", "5"], capacity=(DP1, DP2),
    )  # fmt: skip


def test_the_issues_run_has_a_figure_for_every_preemption() -> None:
    first, second, third = report.preemptions(issue_run(), STEP)
    # The first two ended in one restart (attempt 2): its time without training, from
    # attempt 0's last step to attempt 2's first, belongs to the drain that struck last
    # before it began (the second); the first one's part, up to the second drain, is empty.
    gap = 79.6 - (9.5 + 266 * STEP)
    assert first.shared_with == (2,) and second.shared_with == (1,) and third.shared_with == ()
    assert first.without_training_s == 0.0
    assert second.without_training_s == pytest.approx(gap)
    assert first.steps_lost == second.steps_lost == third.steps_lost == 0
    assert first.resumed_step == second.resumed_step == 267
    # Each one's latency runs from its own drain to the run's next step.
    assert first.drain_to_first_step_s == pytest.approx(79.6 - 2.7)
    assert second.drain_to_first_step_s == pytest.approx(79.6 - 5.7)
    # No preemptible node in service from the second drain to dp-1's return: the fleet's.
    assert first.capacity_wait_s == pytest.approx(72.7 - 5.7)
    assert second.capacity_wait_s == pytest.approx(72.7 - 5.7)
    assert third.capacity_wait_s == 0.0
    assert third.without_training_s == pytest.approx(125.6 - (117.9 + 38 * STEP))
    assert third.drain_to_first_step_s == pytest.approx(125.6 - 115.0)


def test_the_issues_run_passes_the_drill_with_every_summary_figure() -> None:
    run = issue_run()
    summary = report.summarize(run, None)
    assert verdict.missing(summary) == []
    pre = report.preemptions(run)
    total = sum(p.without_training_s or 0 for p in pre)
    assert summary.training_lost_per_preemption_s == pytest.approx(total / 3)
    waits = [p.capacity_wait_s or 0 for p in pre]
    assert summary.mean_capacity_wait_s == pytest.approx(sum(waits) / 3)
    assert summary.mean_own_latency_s == pytest.approx(
        (summary.mean_drain_to_first_step_s or 0) - (summary.mean_capacity_wait_s or 0)
    )
    result = drill_result(run, None, timings="stock")
    assert result.failures() == []
    lines = table.render(result)
    assert lines[-1] == "slurmpre kept its promise: zero steps lost, identical weights"
    assert any("drains 1 and 2 struck before the run trained again" in line for line in lines)
    for label, key in verdict.MUST_LEAD:
        row = next(line for line in lines if line.startswith(_label(key)))
        assert " - " not in f"{row} ", f"{label}: {row}"


def _label(key: str) -> str:
    return next(label for label, k, _, _ in verdict.SUMMARY_ROWS if k == key)


def drill_result(ours: Observed, seeds: Observed | None, timings: str = "tuned") -> DrillResult:
    runs = {"slurmpre": ours, **({"seeds": seeds} if seeds else {})}
    return DrillResult(
        seed=1, options=DrillOptions(preemptions=len(ours.hits)), timings=timings,
        schedule=[Moment(h.moment) for h in ours.hits], runs=runs,
        identical={"slurmpre": True}, workdir=Path("/w"),
    )  # fmt: skip


# -- schedules drawn from seeds -------------------------------------------------------
BASE = int(os.environ.get("SLURMPRE_TIMELINE_SEED", "0"))
COUNT = 300


@pytest.mark.parametrize("mode", ["slurmpre", "seeds"])
def test_every_drawn_schedule_has_every_figure_and_they_add_up(mode: str) -> None:
    print(f"schedules from seed {BASE} to {BASE + COUNT - 1} (SLURMPRE_TIMELINE_SEED)")
    kinds: set[str] = set()
    for seed in range(BASE, BASE + COUNT):
        run, truth, _ = generate(seed, mode)
        where = f"{mode} seed {seed}"
        pre = report.preemptions(run)
        summary = report.summarize(run, None)
        assert verdict.missing(summary) == [], where
        for i, p in enumerate(pre):
            figures = (p.steps_lost, p.without_training_s, p.training_lost_s,
                       p.drain_to_first_step_s, p.capacity_wait_s)  # fmt: skip
            assert None not in figures, f"{where}, preemption {i + 1}: {p}"
            back = truth.back_at.get(i)
            want = 0.0 if back is None else back - run.hits[i].drained_at
            assert p.drain_to_first_step_s == pytest.approx(max(want, 0.0)), where
            assert 0 <= (p.capacity_wait_s or 0) <= (p.drain_to_first_step_s or 0) + 1e-9, where
            assert p.capacity_wait_s == pytest.approx(_no_capacity(run, i, back), abs=1e-6), where
            for j in p.shared_with:  # one restart, seen from both sides
                assert i + 1 in pre[j - 1].shared_with, where
            kinds.add(p.moment if not p.shared_with else "overlap")
            kinds |= {"capacity"} if p.capacity_wait_s else set()
            kinds |= {"returned early"} if run.hits[i].removed_at is None else set()
        # The shares of each restart add up to the run's time without training, once.
        total = sum(p.without_training_s or 0 for p in pre)
        assert total == pytest.approx(truth.without_training, abs=1e-6), where
        assert summary.steps_lost == truth.steps_lost == summary.steps_computed - summary.steps
        kinds |= {"both gone"} if run.outages else set()
    # The draw covers what the issue names.
    assert {"startup", "checkpoint", "training", "capacity", "returned early", "both gone"} <= kinds
    if mode == "slurmpre":
        assert "overlap" in kinds


def _no_capacity(run: Observed, i: int, back: float | None) -> float:
    """Brute force: the seconds from the drain to ``back`` during which no preemptible node
    was in service, found by looking at the middle of every stretch between two events."""
    if back is None:
        return 0.0
    drains = [*run.hits, *run.outages]
    start = run.hits[i].drained_at
    cuts = sorted(
        {start, back}
        | {t for h in drains for t in (h.drained_at, h.returned_at) if t and start < t < back}
    )

    def out(node: str, t: float) -> bool:
        return any(
            h.node == node and h.drained_at <= t and (h.returned_at is None or t < h.returned_at)
            for h in drains
        )

    return sum(
        b - a for a, b in itertools.pairwise(cuts)
        if all(out(n, (a + b) / 2) for n in run.capacity)
    )  # fmt: skip


@pytest.mark.parametrize("seed", range(40))
def test_drawn_runs_side_by_side_never_fail_the_drill_for_a_missing_figure(seed: int) -> None:
    ours, _, _ = generate(seed, "slurmpre")
    seeds, _, _ = generate(seed, "seeds")
    failures = drill_result(ours, seeds, timings="stock").failures()
    assert not [f for f in failures if "figure" in f], failures
    lines = table.render(drill_result(ours, seeds))
    assert not [line for line in lines if "a bug in the drill's report" in line]


# -- the fleet's capacity -------------------------------------------------------------
def capacity_run(hits: list[Hit], needed: int = 1, nodes: tuple[str, ...] = (DP1, DP2)) -> Observed:
    return Observed("slurmpre", "1", 0.0, 500.0, "COMPLETED", [], [], hits,
                    capacity=nodes, nodes_needed=needed)  # fmt: skip


def test_capacity_is_lacking_only_while_too_few_nodes_are_in_service() -> None:
    both = [Hit("startup", 0, DP1, 10.0, 70.0, 80.0), Hit("startup", 1, DP2, 20.0, 80.0, 95.0)]
    run = capacity_run(both)
    assert run.out_of_service(0.0, 200.0) == 80.0 - 20.0  # both out: 20 to 80
    assert run.out_of_service(30.0, 50.0) == 20.0
    assert run.out_of_service(85.0, 200.0) == 0.0
    # A job of two nodes lacks them whenever either is out.
    assert capacity_run(both, needed=2).out_of_service(0.0, 200.0) == 95.0 - 10.0


def test_a_node_back_before_its_removal_and_a_node_gone_for_good() -> None:
    early = Hit("training", 0, DP1, 10.0, None, 25.0)  # undrained at 25 s, never removed
    gone = Hit("training", 1, DP2, 15.0, 75.0, None)  # removed, no replacement in the run
    run = capacity_run([early, gone])
    assert run.out_of_service(0.0, 100.0) == 25.0 - 15.0
    run.outages = [Hit("capacity", -1, DP1, 30.0, 90.0, 120.0)]  # the fleet's own drain
    assert run.out_of_service(0.0, 100.0) == 10.0 + (100.0 - 30.0)


# -- the verdict ----------------------------------------------------------------------
def test_a_missing_figure_is_the_reports_bug_not_the_runs() -> None:
    run = issue_run()
    summary = report.summarize(run, None)
    broken = report.Summary(**{**summary.__dict__, "training_lost_per_preemption_s": None})
    assert verdict.missing(broken) == ["training time lost / preemption (s)"]
    # Nothing is missing where nothing can be: no preemption, no reference.
    calm = report.Summary(**{**summary.__dict__, "preemptions": 0,
                             "training_lost_per_preemption_s": None,
                             "mean_drain_to_first_step_s": None})  # fmt: skip
    assert verdict.missing(calm) == []
    # And one the report cannot give is never held against slurmpre.
    assert verdict.behind(summary, broken) == []


def test_fewer_preemptions_than_planned_is_said_but_is_not_slurmpres_failure() -> None:
    run = issue_run()
    result = drill_result(run, None)
    result.schedule.append(Moment("training", 5))
    assert result.failures() == []
    assert any("made 3 of its 4 planned preemptions" in line for line in table.render(result))


# -- a real run ----------------------------------------------------------------------
RECORDED = Path(__file__).parents[1] / "data" / "drill" / "seed-1398317274-22.05-stock.json.gz"


def test_the_issues_seed_recorded_on_the_sandbox_passes_with_a_figure_in_every_row(
    tmp_path: Path,
) -> None:
    """`./bin/drill --seed 1398317274` on this machine (Slurm 22.05.8, stock timings) with the
    report before the fix: the same two drains at start-up, attempt 1 never trained, and the
    drill exited 1 ("no figure for its training time lost per preemption"). Its timelines,
    read again: every figure, and the verdict the run deserved."""
    path = tmp_path / "timelines.json"
    path.write_bytes(gzip.decompress(RECORDED.read_bytes()))
    result = DrillResult.load(path)
    assert result.failures() == []
    ours = report.preemptions(result.runs["slurmpre"])
    assert [p.moment for p in ours] == ["startup", "startup", "checkpoint"]
    assert ours[0].shared_with == (2,)
    assert all(None not in (p.steps_lost, p.without_training_s, p.drain_to_first_step_s,
                            p.capacity_wait_s) for p in ours)  # fmt: skip
    # Both nodes were out from the second drain until dp-1's replacement came back.
    hits = result.runs["slurmpre"].hits
    assert ours[1].capacity_wait_s == pytest.approx(hits[0].returned_at - hits[1].drained_at)
    seeds = report.summarize(result.runs["seeds"], result.runs["reference"])
    assert seeds.steps_lost == seeds.steps_computed - seeds.steps == 1155
    for name in ("seeds", "slurmpre"):
        assert verdict.missing(report.summarize(result.runs[name], result.runs["reference"])) == []
    assert table.render(result)[-1] == (
        "slurmpre kept its promise: zero steps lost, identical weights"
    )
