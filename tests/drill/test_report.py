"""The drill's timeline and summary, from the records a run leaves (built by hand here)."""

from __future__ import annotations

from typing import Any

from slurmpre.drill import report, table, verdict
from slurmpre.drill.timeline import Hit, Observed, Sample
from slurmpre.folder import records

NODES = ("gpu-preemptible-dp-1", "gpu-preemptible-dp-2")


def steps(attempt: int, first: int, last: int, t0: float, dt: float = 1.0) -> list[dict[str, Any]]:
    return [
        {"event": "step", "attempt": attempt, "step": s, "t": t0 + (s - first) * dt}
        for s in range(first, last + 1)
    ]


def slurmpre_run() -> Observed:
    """Attempt 0 trains steps 1-30 on two nodes, is drained at t=130 and checkpoints step 30;
    attempt 1 resumes from 30 on one node at t=150 and finishes at step 60."""
    log = [
        {
            "event": "begin",
            "attempt": 0,
            "t": 100.0,
            "resumed_step": 0,
            "resume_path": None,
            "world": 2,
        },
        *steps(0, 1, 30, 101.0),
        {"event": "save-start", "attempt": 0, "t": 131.0, "step": 30, "why": "notice"},
        {"event": "save-end", "attempt": 0, "t": 132.0, "step": 30, "why": "notice"},
        {
            "event": "begin",
            "attempt": 1,
            "t": 150.0,
            "resumed_step": 30,
            "resume_path": "/c/step-00000030",
            "world": 1,
        },
        *steps(1, 31, 60, 151.0),
        {"event": "done", "attempt": 1, "t": 181.0, "step": 60},
    ]
    notice = {"kind": "drain", "node": NODES[1], "reason": "preempted", "first": True}
    ledger = [
        r.to_json()
        for r in (
            records.Notice(job="5", attempt=0, seen_at=131.5, time=131.5, **notice),
            records.Checkpoint(
                job="5", attempt=0, step=30, path="/c/step-00000030", after_notice=True, time=132.0
            ),
            records.Requeued(job="5", attempt=0, why="notice", requeued_at=132.5, time=132.5),
            records.Notice(job="4", attempt=0, seen_at=1.0, time=1.0, **notice),  # another job's
        )
    ]
    samples = [
        Sample(90.0, "PENDING", 0, ()),
        Sample(99.0, "RUNNING", 0, NODES),
        Sample(133.0, "PENDING", 1, ()),
        Sample(149.0, "RUNNING", 1, NODES[:1]),
        Sample(182.0, "COMPLETED", 1, NODES[:1]),
    ]
    hits = [Hit("training", 0, NODES[1], drained_at=130.0, removed_at=150.0, returned_at=160.0)]
    return Observed("slurmpre", "5", 90.0, 182.0, "COMPLETED", log, samples, hits, ledger)


def reference_run() -> Observed:
    log = [
        {"event": "begin", "attempt": 0, "t": 100.0, "resumed_step": 0, "world": 1},
        *steps(0, 1, 60, 101.0, dt=0.5),
        {"event": "done", "attempt": 0, "t": 131.0, "step": 60},
    ]
    samples = [Sample(90.0, "RUNNING", 0, ("gpu-dp-1",)), Sample(132.0, "COMPLETED", 0, ())]
    return Observed("reference", "6", 90.0, 132.0, "COMPLETED", log, samples, [])


def test_attempts_and_the_preemption_between_them() -> None:
    run = slurmpre_run()
    first, second = report.attempts(run)
    assert (first.attempt, first.nodes, first.resumed_step, first.last_step) == (0, NODES, 0, 30)
    assert first.ended == "preempted" and second.ended == "completed"
    assert (second.nodes, second.resumed_step, second.started_at) == (NODES[:1], 30, 149.0)
    (p,) = report.preemptions(run)
    assert p.notice_seen_s == 1.5  # this job's notice, not job 4's
    assert p.checkpoint_step == 30 and p.requeue_s == 2.5
    assert p.resumed_step == 30 and p.steps_lost == 0
    assert p.without_training_s == 151.0 - 130.0
    assert p.drain_to_first_step_s == 151.0 - 130.0


def test_steps_lost_count_what_the_next_attempt_trains_again() -> None:
    run = slurmpre_run()
    run.log = [
        {**e, "resumed_step": 20, "resume_path": "/c/step-00000020"}
        if e["event"] == "begin" and e["attempt"] == 1
        else e
        for e in run.log
    ]
    (p,) = report.preemptions(run)
    assert p.steps_lost == 10
    summary = report.summarize(run, reference_run())
    assert summary.steps_lost == 10
    assert summary.partial_checkpoint_loaded  # no save-end of step 20 was ever logged


def test_summary_figures() -> None:
    s = report.summarize(slurmpre_run(), reference_run())
    assert (s.state, s.attempts, s.preemptions, s.steps, s.steps_lost) == ("COMPLETED", 2, 1, 60, 0)
    assert s.steps_computed == 60
    assert s.wall_s == 92.0 and s.uninterrupted_wall_s == 42.0
    assert s.wall_ratio == 92.0 / 42.0
    assert s.goodput == (130.5 - 101.0) / 92.0
    # node-seconds: 2 nodes from 99 to 133, 1 node from 149 to 182
    assert s.node_seconds == 2 * 34.0 + 33.0
    rate = 10.0 / 3600
    assert s.cost_preemptible == s.node_seconds * rate * 0.5
    assert s.cost_on_demand_uninterrupted == 42.0 * 2 * rate
    assert not s.partial_checkpoint_loaded


def test_an_attempt_preempted_before_its_first_step_loses_nothing() -> None:
    run = slurmpre_run()
    run.hits.insert(0, Hit("startup", 0, NODES[0], drained_at=95.0))
    run.log = [{**e, "attempt": e["attempt"] + 1} for e in run.log]
    run.hits[1:] = [Hit("training", 1, NODES[1], drained_at=130.0)]
    run.samples.insert(1, Sample(94.0, "RUNNING", 0, NODES))
    first = report.preemptions(run)[0]
    assert first.moment == "startup" and first.steps_lost == 0 and first.resumed_step == 0
    # No step before it: the time lost counts from when the attempt ran (94 s) to the
    # next attempt's first step (101 s), so every preemption has the figure.
    assert first.without_training_s == 101.0 - 94.0
    assert report.summarize(run, reference_run()).training_lost_per_preemption_s is not None


def test_a_run_with_no_next_attempt_has_no_loss_figure() -> None:
    run = slurmpre_run()
    run.log = [e for e in run.log if e["attempt"] == 0]
    (p,) = report.preemptions(run)
    assert p.steps_lost is None and p.resumed_step is None
    assert report.summarize(run, None).steps_lost is None


def test_text_has_a_row_per_attempt_and_preemption_and_ratios_side_by_side() -> None:
    run = slurmpre_run()
    lines = table.timeline_lines(run)
    assert lines[0] == "slurmpre (job 5): COMPLETED"
    assert sum(1 for line in lines if line.strip().startswith(("0 ", "1 "))) == 3
    seeds = slurmpre_run()
    seeds.mode = "seeds"
    rows = table.summary_lines(
        [report.summarize(seeds, reference_run()), report.summarize(run, reference_run())]
    )
    assert "x better" in rows[0]
    wall = next(line for line in rows if line.startswith("wall time (s)"))
    assert wall.split()[-3:] == ["92.0", "92.0", "1.00"]


def test_every_ratio_reads_times_better_for_slurmpre_whichever_way_the_figure_counts() -> None:
    """Goodput counts up, wall time down: both read above 1 when slurmpre is ahead (it
    once printed 1.32 for a goodput of 0.44 against 0.58, which was behind)."""
    assert verdict.times_better(seeds=0.58, ours=0.44, better="higher") < 1
    assert verdict.times_better(seeds=0.44, ours=0.58, better="higher") > 1
    assert verdict.times_better(seeds=533.1, ours=526.6, better="lower") > 1
    assert verdict.times_better(seeds=41, ours=0, better="lower") == float("inf")
    assert verdict.times_better(seeds=0, ours=0, better="lower") == 1.0


def test_the_drill_fails_where_slurmpre_is_behind_the_seeds_recipe() -> None:
    ref = reference_run()
    ours = report.summarize(slurmpre_run(), ref)
    slower = slurmpre_run()
    slower.ended_at -= 10  # the recipe ends 10 s sooner...
    slower.mode = "seeds"
    theirs = report.summarize(slower, ref)
    assert verdict.behind(theirs, ours) == [
        "it is behind the seeds' recipe on wall time (92 against 82)"
    ]
    assert verdict.behind(ours, ours) == []


def test_a_run_follows_its_successor_jobs_and_counts_both_jobs_nodes() -> None:
    """A hand-over: attempt 1 is job 6, which starts up beside job 5 (both hold a node)."""
    run = slurmpre_run()
    run.attempt_ids = {0: ("5", 0), 1: ("6", 0)}
    run.jobs = ["5", "6"]
    run.ledger = [
        r
        for r in run.ledger
        if r["event"] != "requeued"
    ] + [
        records.Successor(job="5", attempt=0, successor="6", excluded=(NODES[1],), why="notice",
                          submitted_at=131.0, time=131.0).to_json(),
    ]  # fmt: skip
    run.samples = [
        Sample(99.0, "RUNNING", 0, NODES, "5"),
        Sample(133.0, "COMPLETED", 0, NODES, "5"),
        Sample(99.0, "PENDING", 1, (), "6"),
        Sample(140.0, "RUNNING", 1, (NODES[0],), "6"),
        Sample(182.0, "COMPLETED", 1, (NODES[0],), "6"),
    ]
    (p,) = report.preemptions(run)
    assert p.requeue_s == 131.0 - 130.0 and p.checkpoint_step == 30 and p.steps_lost == 0
    assert [(a.job, a.job_attempt) for a in report.attempts(run)] == [("5", 0), ("6", 0)]
    # 2 nodes 99-133 for job 5, and job 6's node 140-182, overlapping it
    assert report.summarize(run, reference_run()).node_seconds == 2 * 34.0 + 42.0
