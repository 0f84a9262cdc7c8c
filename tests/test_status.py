"""`slurmpre status`: attempt rows and totals from a ledger the sandbox wrote (a drill run
of three preemptions), and from variations of it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from slurmpre.folder.records import Record
from slurmpre.login.status import Prices, gpus_of, job_status, lines
from slurmpre.slurm.parse import parse_jobs

from tests.conftest import DATA

LEDGER = DATA / "ledgers" / "drill-three-preemptions.jsonl"
RUNNING = parse_jobs((DATA / "slurm-22.05" / "job-running-elastic.txt").read_text())[-1]


def records() -> list[dict[str, Any]]:
    """The ledger's lines as JSON objects, for a test to vary."""
    return [json.loads(line) for line in LEDGER.read_text().splitlines()]


def typed(recs: list[dict[str, Any]]) -> list[Record]:
    return [Record.from_json(r) for r in recs]


def test_three_preemptions_four_attempts() -> None:
    recs = records()
    end = max(r["time"] for r in recs)
    st = job_status("6", "drill", "/c", typed(recs), None, prices=Prices(2.0, 0.5), now=end)
    assert st.state == "UNKNOWN TO SLURM" and st.restarts == 3
    assert [a.ended for a in st.attempts] == [
        "notice -> requeue",
        "notice -> requeue",
        "notice -> requeue",
        "completed",
    ]
    assert [a.resume_step for a in st.attempts] == [None, None, 41, 82]
    assert [a.checkpoint_step for a in st.attempts] == [None, 41, 82, None]
    # attempt 0 was requeued before the training asked about the notice: its steps are unseen
    assert [a.steps_lost for a in st.attempts] == [None, 0, 0, None]
    assert st.attempts[1].nodes == ("gpu-preemptible-dp-1",)
    assert st.attempts[1].notice == "drain of gpu-preemptible-dp-1 (preempted)"
    gaps = [a.gap_s for a in st.attempts]
    assert gaps[3] is None and all(g is not None and 5 < g < 30 for g in gaps[:3])
    held = sum(
        (a.ended_at - a.started_at) * len(a.nodes)  # type: ignore[operator]
        for a in st.attempts
    )
    assert st.node_hours == pytest.approx(held / 3600)
    assert st.gpu_hours == 0
    assert st.cost_on_demand == pytest.approx(st.node_hours * 2.0)
    assert st.cost_preemptible == pytest.approx(st.cost_on_demand / 2)
    text = lines(st)
    assert text[0].startswith("job 6 (drill): UNKNOWN TO SLURM, 3 restart(s)")
    rows = [line for line in text if not line.lstrip().startswith(("grow ", "shrink "))]
    assert sum(1 for line in rows if "notice -> requeue" in line) == 3


def test_a_node_failure_and_an_older_resume_lose_steps() -> None:
    """Attempt 2 is killed with its node (no notice checkpoint, no end record), and attempt 3
    resumes from step 41 though step 80 was committed: at least 39 steps lost."""
    recs = [
        r
        for r in records()
        if not (r.get("attempt") == 2 and r["event"] in ("notice", "requeued", "end", "committed"))
        and not (r.get("attempt") == 2 and r["event"] == "checkpoint" and r["step"] == 82)
    ]
    for r in recs:
        if r.get("attempt") == 3 and r["event"] == "start":
            r["step"], r["resume_from"] = 41, r["resume_from"].replace("82", "41")
    st = job_status("6", "drill", "/c", typed(recs), None, now=0.0)
    a2 = st.attempts[2]
    assert a2.ended == "node failure" and a2.steps_lost == 80 - 41


def test_an_attempt_that_failed_and_that_slurm_started_again_says_so() -> None:
    """Its node was lost with no notice: node 0's wrapper saw the step fail (exit 1), and
    Slurm requeued the job; the next attempt resumed."""
    recs = [
        r
        for r in records()
        if not (r.get("attempt") == 2 and r["event"] in ("notice", "requeued", "committed"))
    ]
    for r in recs:
        if r.get("attempt") == 2 and r["event"] == "end":
            r["exit_code"] = 1
    st = job_status("6", "drill", "/c", typed(recs), None, now=0.0)
    assert st.attempts[2].ended == "failed (exit 1) -> requeue"


def test_a_running_job_counts_its_time_until_now_and_gpus_from_tres() -> None:
    recs = [r for r in records() if not (r.get("attempt") == 3 and r["event"] == "end")]
    start = next(r["time"] for r in recs if r.get("attempt") == 3 and r["event"] == "start")
    st = job_status("6", "drill", "/c", typed(recs), RUNNING, gpus_per_node=8, now=start + 3600)
    assert st.attempts[-1].ended == "running" and st.state == "RUNNING"
    assert st.gpu_hours == pytest.approx(st.node_hours * 8)
    assert st.node_hours > 1.0  # the running attempt's hour on its one node


def test_gpus_per_node_from_the_jobs_tres() -> None:
    raw = {**RUNNING.raw, "TRES": "cpu=4,mem=8G,node=2,billing=4,gres/gpu=16"}
    assert gpus_of(RUNNING.__class__(**{**RUNNING.__dict__, "raw": raw})) == 8
    assert gpus_of(RUNNING) == 0 and gpus_of(None) == 0


def test_only_this_jobs_records_count() -> None:
    recs = [*records(), {"event": "start", "job": "7", "attempt": 0, "time": 1.0, "nodes": ["x"]}]
    st = job_status("6", "drill", "/c", typed(recs), None, now=0.0)
    assert len(st.attempts) == 4


def test_an_in_place_restart_is_a_row_of_its_own_and_not_a_requeue() -> None:
    """A sandbox job (tests/e2e/test_login.py): its second node drained and released (the
    batch host trained on, attempt 0.1), then the batch host drained (a requeue)."""
    recs = [
        json.loads(line)
        for line in (DATA / "ledgers" / "in-place-then-requeue.jsonl").read_text().splitlines()
    ]
    job = str(recs[0]["job"])
    st = job_status(job, "tiny", "/c", typed(recs), None, now=max(r["time"] for r in recs))
    assert [(a.attempt, a.in_place, a.label) for a in st.attempts] == [
        (0, 0, "0"),
        (0, 1, "0.1"),
        (1, 0, "1"),
    ]
    ended = [a.ended for a in st.attempts]
    assert ended == ["notice -> in place", "notice -> requeue", "completed"]
    assert [len(a.nodes) for a in st.attempts] == [2, 1, 1]
    assert [(r.kind, r.nodes_from, r.nodes_to, r.cause) for r in st.resizes] == [
        ("shrink", 2, 1, "notice -> in place")
    ]
    assert [a.steps_lost for a in st.attempts] == [0, 0, None]
    assert st.restarts == 1  # Slurm requeued it once; the in-place restart is not one
    text = lines(st)
    assert any(line.split()[0] == "0.1" for line in text[2:])


def test_a_run_handed_over_to_successors_is_one_run_across_job_ids() -> None:
    """restart = "successor": job 10 hands over to 11, which hands over to 12; `status 10`
    shows the run's three attempts, their jobs, and zero steps lost at each hand-over."""
    t = 1000.0
    recs: list[dict[str, Any]] = []
    for i, (job, after) in enumerate((("10", None), ("11", "10"), ("12", "11"))):
        resumed = None if after is None else 20 * i
        path = None if resumed is None else f"/c/step-{resumed:08d}"
        recs.append({"event": "start", "job": job, "attempt": 0, "nodes": [f"n{i}"],
                     "num_nodes": 1, "world_size": 1, "resume_from": path, "step": resumed,
                     "time": t + 100 * i})  # fmt: skip
        if job != "12":
            recs += [
                {"event": "notice", "job": job, "attempt": 0, "kind": "drain", "node": f"n{i}",
                 "reason": "preempted", "seen_at": t + 100 * i + 50, "first": True,
                 "time": t + 100 * i + 50},
                {"event": "checkpoint", "job": job, "attempt": 0, "step": 20 * (i + 1),
                 "path": "/c", "after_notice": True, "seconds": 1.0, "time": t + 100 * i + 55},
                {"event": "successor", "job": job, "attempt": 0, "successor": str(11 + i),
                 "excluded": [f"n{i}"], "why": "after the just-in-time checkpoint",
                 "submitted_at": t + 100 * i + 56, "time": t + 100 * i + 56},
            ]  # fmt: skip
        recs.append({"event": "end", "job": job, "attempt": 0, "exit_code": 0, "seconds": 60.0,
                     "time": t + 100 * i + 60})  # fmt: skip
    st = job_status("10", "run", "/c", typed(recs), None, now=t + 400)
    assert st.chain == ["10", "11", "12"]
    assert [a.job for a in st.attempts] == ["10", "11", "12"]
    assert [a.ended for a in st.attempts] == ["notice -> job 11", "notice -> job 12", "completed"]
    assert [a.steps_lost for a in st.attempts] == [0, 0, None]
    assert st.restarts == 2
    text = lines(st)
    assert text[0].startswith("jobs 10 -> 11 -> 12 (run)")
    assert any(line.lstrip().startswith("11.0 ") for line in text)
    # Asked from the middle of the run, it shows the rest of it.
    assert job_status("11", "run", "/c", typed(recs), None, now=t + 400).chain == ["11", "12"]


def test_a_successor_holds_its_nodes_from_its_start_up_while_it_waits() -> None:
    """Make before break: job 11 started up at +50 s and waited for job 10 until +60 s; its
    node counts from +50 s, beside job 10's, not from its Start at +61 s."""
    t = 1000.0
    recs: list[dict[str, Any]] = [
        {"event": "start", "job": "10", "attempt": 0, "nodes": ["n1"], "num_nodes": 1,
         "world_size": 1, "resume_from": None, "step": None, "time": t},
        {"event": "successor", "job": "10", "attempt": 0, "successor": "11", "excluded": ["n1"],
         "why": "at the notice", "submitted_at": t + 45, "time": t + 45},
        {"event": "waiting", "job": "11", "attempt": 0, "predecessor": "10",
         "waiting_at": t + 50, "time": t + 50},
        {"event": "end", "job": "10", "attempt": 0, "exit_code": 0, "seconds": 60.0,
         "time": t + 60},
        {"event": "start", "job": "11", "attempt": 0, "nodes": ["n2"], "num_nodes": 1,
         "world_size": 1, "resume_from": "/c/step-00000020", "step": 20, "time": t + 61},
        {"event": "end", "job": "11", "attempt": 0, "exit_code": 0, "seconds": 40.0,
         "time": t + 101},
    ]  # fmt: skip
    st = job_status("10", "run", "/c", typed(recs), None, now=t + 200)
    assert st.node_hours * 3600 == pytest.approx(60 + 51)


def test_the_overlap_of_a_hand_over_shows_in_the_timeline() -> None:
    """Make before break, as `status` shows it: the successor up and waiting at +50 s beside
    its predecessor, which saved on its notice, trained on, and was told to stop at +51 s."""
    t = 1000.0
    recs: list[dict[str, Any]] = [
        {"event": "start", "job": "10", "attempt": 0, "nodes": ["n1"], "num_nodes": 1,
         "world_size": 1, "resume_from": None, "step": None, "time": t},
        {"event": "successor", "job": "10", "attempt": 0, "successor": "11", "excluded": ["n1"],
         "why": "at the notice", "submitted_at": t + 45, "time": t + 45},
        {"event": "waiting", "job": "11", "attempt": 0, "predecessor": "10",
         "waiting_at": t + 50, "time": t + 50},
        {"event": "stopping", "job": "10", "attempt": 0, "why": "job 11 is ready to take over",
         "asked_at": t + 51, "time": t + 51},
        {"event": "end", "job": "10", "attempt": 0, "exit_code": 0, "seconds": 60.0,
         "time": t + 60},
        {"event": "start", "job": "11", "attempt": 0, "nodes": ["n2"], "num_nodes": 1,
         "world_size": 1, "resume_from": "/c/step-00000020", "step": 20, "time": t + 61},
    ]  # fmt: skip
    st = job_status("10", "run", "/c", typed(recs), None, now=t + 200)
    first, second = st.attempts
    assert (first.up_at, first.stop_asked_at) == (None, t + 51)
    assert (second.up_at, second.waited_for, second.stop_asked_at) == (t + 50, "10", None)
    assert st.as_dict()["attempts"][1]["up_at"] == t + 50
    text = "\n".join(lines(st))
    assert "up at +50s beside job 10, whose last checkpoint it waited for 11 s" in text
    assert "told to stop at +51s: job 11 is ready to take over" in text


def test_an_attempt_scancel_ended_is_cancelled_not_failed() -> None:
    """`slurmpre cancel` (scancel) ends the last attempt with 143: Slurm's state says why."""
    from dataclasses import replace

    recs = records()
    last = max(r["attempt"] for r in recs if r["event"] == "end")
    for r in recs:
        if r["event"] == "end" and r["attempt"] == last:
            r["exit_code"] = 143
    end = max(r["time"] for r in recs)
    cancelled = replace(RUNNING, job_id="6", state="CANCELLED", restarts=3)
    st = job_status("6", "drill", "/c", typed(recs), cancelled, now=end)
    assert st.attempts[-1].ended == "cancelled (exit 143)"
    st = job_status("6", "drill", "/c", typed(recs), replace(cancelled, state="FAILED"), now=end)
    assert st.attempts[-1].ended == "failed (exit 143)"


def test_a_run_moved_to_standard_nodes_shows_where_each_job_trained_and_its_price() -> None:
    """Job 10 hands over to 11 on standard nodes (its `placed` record): 11's hour costs
    the full price, 10's the preemptible one, and the hand-over line says why."""
    t = 1000.0
    recs: list[dict[str, Any]] = [
        {"event": "start", "job": "10", "attempt": 0, "nodes": ["p1"], "num_nodes": 1,
         "world_size": 1, "resume_from": None, "step": None, "time": t},
        {"event": "notice", "job": "10", "attempt": 0, "kind": "drain", "node": "p1",
         "reason": "preempted", "seen_at": t + 3590, "first": True, "time": t + 3590},
        {"event": "successor", "job": "10", "attempt": 0, "successor": "11", "excluded": ["p1"],
         "why": "x", "submitted_at": t + 3591, "time": t + 3591},
        {"event": "placed", "job": "10", "attempt": 0, "where": "standard",
         "why": "1 preemptions: fallback_after = 1", "decided_at": t + 3591, "preemptions": 1,
         "time": t + 3591},
        {"event": "end", "job": "10", "attempt": 0, "exit_code": 0, "seconds": 3600.0,
         "time": t + 3600},
        {"event": "start", "job": "11", "attempt": 0, "nodes": ["s1"], "num_nodes": 1,
         "world_size": 1, "resume_from": "/c/x", "step": 10, "time": t + 3600},
        {"event": "end", "job": "11", "attempt": 0, "exit_code": 0, "seconds": 3600.0,
         "time": t + 7200},
    ]  # fmt: skip
    st = job_status("10", "run", "/c", typed(recs), None, prices=Prices(2.0, 0.5), now=t + 7200)
    assert [a.on for a in st.attempts] == ["preemptible", "standard"]
    assert st.attempts[0].placed == "standard: 1 preemptions: fallback_after = 1"
    assert st.node_hours == pytest.approx(2.0) and st.standard_node_hours == pytest.approx(1.0)
    assert st.cost == pytest.approx(1.0 + 2.0)  # an hour at half price, one at full
    text = "\n".join(lines(st))
    assert "next job on standard: 1 preemptions: fallback_after = 1" in text
    assert "(1.000 on standard nodes)" in text and "$3.00 against $4.00 on demand" in text


def test_a_twin_that_took_over_is_the_runs_next_job_and_ran_on_standard_nodes() -> None:
    """Job 10 handed over to 11 (preemptible, never started) and queued 12, its twin on
    standard nodes; 12 claimed the hand-over and trained: the chain is 10 -> 12."""
    t = 1000.0
    recs: list[dict[str, Any]] = [
        {"event": "start", "job": "10", "attempt": 0, "nodes": ["p1"], "step": None, "time": t},
        {"event": "successor", "job": "10", "attempt": 0, "successor": "11", "excluded": ["p1"],
         "why": "x", "submitted_at": t + 50, "time": t + 50},
        {"event": "successor", "job": "10", "attempt": 0, "successor": "12", "excluded": ["p1"],
         "why": "the twin", "submitted_at": t + 51, "time": t + 51},
        {"event": "placed", "job": "10", "attempt": 0, "where": "preemptible", "why": "ahead",
         "decided_at": t + 50, "twin": "12", "twin_from": t + 600, "time": t + 51},
        {"event": "end", "job": "10", "attempt": 0, "exit_code": 0, "seconds": 60.0,
         "time": t + 60},
        {"event": "claimed", "job": "12", "attempt": 0, "predecessor": "10", "time": t + 600},
        {"event": "start", "job": "12", "attempt": 0, "nodes": ["s1"], "step": 5, "time": t + 601},
    ]  # fmt: skip
    st = job_status("10", "run", "/c", typed(recs), None, now=t + 700)
    assert st.chain == ["10", "12"]
    assert [(a.job, a.on) for a in st.attempts] == [("10", "preemptible"), ("12", "standard")]


def test_a_grow_shows_from_how_many_nodes_to_how_many_and_the_job_that_took_over() -> None:
    """Grow back (#36): job 10 on one node hands over to job 11 on two (its twin 12, held
    in case the idle node was taken, was cancelled when 11 claimed the hand-over)."""
    t = 1000.0
    recs: list[dict[str, Any]] = [
        {"event": "start", "job": "10", "attempt": 0, "nodes": ["n0"], "num_nodes": 1,
         "world_size": 1, "resume_from": None, "step": None, "time": t},
        {"event": "successor", "job": "10", "attempt": 0, "successor": "11", "excluded": [],
         "why": "growing from 1 to 2 nodes", "submitted_at": t + 50, "time": t + 50},
        {"event": "successor", "job": "10", "attempt": 0, "successor": "12", "excluded": [],
         "why": "the twin", "submitted_at": t + 50, "time": t + 50},
        {"event": "notice", "job": "10", "attempt": 0, "kind": "grow", "node": None,
         "reason": "growing from 1 to 2 nodes", "seen_at": t + 50, "first": True,
         "nodes": 1, "grow_to": 2, "time": t + 50},
        {"event": "checkpoint", "job": "10", "attempt": 0, "step": 40, "path": "/c",
         "after_notice": True, "seconds": 1.0, "time": t + 55},
        {"event": "end", "job": "10", "attempt": 0, "exit_code": 0, "seconds": 56.0,
         "time": t + 56},
        {"event": "claimed", "job": "11", "attempt": 0, "predecessor": "10", "time": t + 58},
        {"event": "start", "job": "11", "attempt": 0, "nodes": ["n0", "n1"], "num_nodes": 2,
         "world_size": 2, "resume_from": "/c/step-00000040", "step": 40, "time": t + 58},
    ]  # fmt: skip
    st = job_status("10", "run", "/c", typed(recs), None, now=t + 100)
    assert [a.job for a in st.attempts] == ["10", "11"]
    assert st.attempts[0].ended == "grow 1 -> 2 nodes: job 11"
    assert [len(a.nodes) for a in st.attempts] == [1, 2]
    assert st.attempts[0].steps_lost == 0
    # The resize, its cause, when, and its cost: 2 s between the attempts on 2 nodes.
    (grew,) = st.resizes
    assert (grew.kind, grew.nodes_from, grew.nodes_to, grew.at) == ("grow", 1, 2, t + 58)
    assert grew.cause == "grow 1 -> 2 nodes: job 11" and grew.gap_s == 2.0
    assert grew.cost == pytest.approx(2.0 / 3600 * 2 * Prices().price * (1 - Prices().discount))
    assert "  grow at +58s: 1 -> 2 nodes (grow 1 -> 2 nodes: job 11), 2 s between ($0.00)" in (
        lines(st)
    )
    assert st.as_dict()["resizes"][0]["kind"] == "grow"  # and in --json


def test_a_spare_swap_and_a_spare_lost_are_told_with_the_world_size_unchanged() -> None:
    """Hot spares (#36): n1 and n2 train, n0 and n3 are held. n3 drains and is released
    while the training goes on; then n2 drains and the spare n0 takes its place in place."""
    t = 1000.0
    recs: list[dict[str, Any]] = [
        {"event": "start", "job": "10", "attempt": 0, "nodes": ["n1", "n2"], "num_nodes": 2,
         "world_size": 2, "resume_from": None, "step": None, "spares": ["n0", "n3"], "time": t},
        {"event": "spare_released", "job": "10", "attempt": 0, "released": ["n3"],
         "release_s": 0.2, "released_at": t + 20, "time": t + 20},
        {"event": "notice", "job": "10", "attempt": 0, "kind": "drain", "node": "n2",
         "reason": "preempted", "seen_at": t + 50, "first": True, "time": t + 50},
        {"event": "checkpoint", "job": "10", "attempt": 0, "step": 40, "path": "/c",
         "after_notice": True, "seconds": 1.0, "time": t + 52},
        {"event": "in_place", "job": "10", "attempt": 0, "kept": ["n1", "n0"],
         "released": ["n2"], "release_s": 0.3, "requested_at": t + 52, "released_at": t + 53,
         "why": "x", "spares_in": ["n0"], "time": t + 53},
        {"event": "end", "job": "10", "attempt": 0, "exit_code": 0, "seconds": 53.0,
         "time": t + 53},
        {"event": "start", "job": "10", "attempt": 0, "in_place": 1, "nodes": ["n0", "n1"],
         "num_nodes": 2, "world_size": 2, "resume_from": "/c/step-00000040", "step": 40,
         "time": t + 57},
    ]  # fmt: skip
    st = job_status("10", "run", "/c", typed(recs), None, now=t + 100)
    assert [len(a.nodes) for a in st.attempts] == [2, 2]
    lost, swap = st.resizes
    assert (lost.kind, lost.at, lost.nodes_to, lost.gap_s) == ("spare lost", t + 20, 2, None)
    assert (swap.kind, swap.nodes_from, swap.nodes_to, swap.gap_s) == ("spare swap", 2, 2, 4.0)
    assert swap.cause.endswith("; spare n0 in")
    text = lines(st)
    assert "     spares: n0,n3 (held, not training)" in text
    assert any(s.startswith("  spare swap at +57s: 2 -> 2 nodes (") for s in text)
    assert (
        "  spare lost at +20s: 2 -> 2 nodes (n3 drained: released while the training "
        "went on)" in text
    )
    # The spares are held nodes: the first attempt held 4 (the job is over for Slurm: the
    # second attempt's time is not known).
    assert st.node_hours == pytest.approx(53 * 4 / 3600)
    assert [r["kind"] for r in st.as_dict()["resizes"]] == ["spare lost", "spare swap"]
