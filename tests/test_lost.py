"""`slurmpre status` on a node lost without notice (`login.lost`): the scene of
bench/big_state.py, two nodes with the local tier, a save every 200 steps at a step every
0.5 s; the other node lost 6 s after the save of step 400 (the training's own log showed
12 steps lost); node 0's step failed, Slurm requeued the job, and attempt 1 resumed at
step 400 from the survivor's copy (the folder's newest was 200)."""

from __future__ import annotations

from typing import Any

import pytest
from slurmpre.folder.records import Record
from slurmpre.login import story
from slurmpre.login.status import job_status, lines

T0 = 1_796_100_000.0
CKPT = "/c/big/step-"


def at(t: float, event: str, attempt: int = 0, **keys: Any) -> dict[str, Any]:
    return {"event": event, "job": "31", "attempt": attempt, "time": T0 + t, **keys}


def saved(t: float, step: int, attempt: int = 0) -> dict[str, Any]:
    return at(t, "saved", attempt, step=step, path=f"/tmp/l/31-{attempt}/step-{step:08d}",
              seconds=0.6, after_notice=False)  # fmt: skip


def flushed(t: float, step: int, attempt: int = 0) -> dict[str, Any]:
    return at(t, "checkpoint", attempt, step=step, path=f"{CKPT}{step:08d}", after_notice=False,
              seconds=0.6, flush_seconds=94.5)  # fmt: skip


def replicated(t: float, step: int) -> list[dict[str, Any]]:
    return [at(t, "replicated", node=n, of=1 - n, step=step, bytes=750_000_000, seconds=2.6)
            for n in (0, 1)]  # fmt: skip


def scene() -> list[dict[str, Any]]:
    """The ledger's lines, as the records of that run write them."""
    return [
        {"event": "submitted", "job": "31", "name": "big", "time": T0 - 5},
        at(
            0,
            "start",
            nodes=["pre-1", "pre-2"],
            num_nodes=2,
            world_size=2,
            resume_from=None,
            step=None,
        ),
        saved(101.0, 200),
        *replicated(104.0, 200),
        flushed(196.0, 200),
        # a step every 0.5 s and a save stall of 0.6 s: 200 steps in 100.6 s
        saved(201.6, 400),
        *replicated(205.0, 400),
        at(207.6, "end", exit_code=1, seconds=207.6),  # the other node went at +207.6 s
        at(
            378.0,
            "start",
            1,
            nodes=["pre-1", "pre-3"],
            num_nodes=2,
            world_size=2,
            resume_from=f"{CKPT}00000400",
            step=400,
        ),
        at(379.0, "adopted", 1, node=0, step=400, source="31-0", nodes=2, save="31.0.0"),
        flushed(475.0, 400, 1),
        saved(481.6, 600, 1),
        flushed(576.0, 600, 1),
        saved(562.2, 800, 1),  # faster here: 200 steps in 80.6 s
        at(570.0, "end", 1, exit_code=0, seconds=192.0),
    ]


def status(recs: list[dict[str, Any]]) -> Any:
    typed = [Record.from_json(r) for r in recs]
    return job_status("31", "big", "/c/big", typed, None, now=T0 + 600)


def test_lost_with_the_training_ended_after_it_is_about_the_steps_its_pace_trained() -> None:
    st = status(scene())
    lost, after = st.attempts
    assert lost.ended == "failed (exit 1) -> requeue" and lost.steps_lost is None
    assert lost.unseen is not None and lost.unseen.rate == pytest.approx(2.0)
    assert (lost.unseen.steps, lost.unseen.about, lost.unseen.since) == (12, True, 400)
    assert lost.lost == "~12" and after.lost == "-"
    text = lines(st)
    row = next(line for line in text if "failed (exit 1) -> requeue" in line)
    assert row.split()[-2:] == ["~12", "170"]  # lost, gap s
    assert (
        "     steps lost ~12: what it trained after its save of step 400 at +202s until its "
        "training ended at +208s, at 2 steps/s, at most the 200 between two saves"
    ) in text
    assert st.as_dict()["attempts"][0]["unseen"]["steps"] == 12


def test_the_story_page_tells_the_estimate() -> None:
    st = status(scene())
    chart = story.chart(st, [Record.from_json(r) for r in scene()], T0 + 600)
    details = {b.detail for b in chart.bars if b.label == "job 31 attempt 0"}
    assert details and all(d is not None and d.endswith("; steps lost: ~12") for d in details)


def test_lost_with_node_0_no_end_is_bounded_by_the_steps_between_saves() -> None:
    """Node 0 went too: no end record; only the next start, 176 s later, comes after the
    loss, when at 2 steps/s the training would have saved step 600 long before."""
    st = status([r for r in scene() if not (r["event"] == "end" and r["attempt"] == 0)])
    lost = st.attempts[0]
    assert lost.ended == "node failure" and lost.lost == "<=200"
    assert any("until the next attempt started at +378s" in line for line in lines(st))


def test_an_end_long_after_the_loss_is_a_bound_not_an_estimate() -> None:
    recs = [
        {**r, "time": T0 + 450.0} if r["event"] == "end" and r["attempt"] == 0 else r
        for r in scene()
    ]
    st = status(recs)
    assert st.attempts[0].lost == "<=200"
    assert any("until its training ended at +450s" in line for line in lines(st))


def test_a_resume_older_than_its_newest_save_counts_the_saves_between() -> None:
    """Both copies of step 400 lost: attempt 1 resumed from the folder's step 200."""
    recs = scene()
    for r in recs:
        if r["event"] == "start" and r["attempt"] == 1:
            r["step"], r["resume_from"] = 200, f"{CKPT}00000200"
    assert status(recs).attempts[0].lost == "~212"


def test_the_write_of_a_save_to_the_folder_is_not_training_time() -> None:
    """Without the tier: each save stops the training 94 s to write the folder; the
    pace between saves leaves it out (200 steps in 100 s, not in 194 s)."""
    recs = [
        at(0, "start", nodes=["pre-1"], num_nodes=1, resume_from=None, step=None),
        at(194.0, "checkpoint", step=200, path=f"{CKPT}00000200", after_notice=False, seconds=94.0),
        at(388.0, "checkpoint", step=400, path=f"{CKPT}00000400", after_notice=False, seconds=94.0),
        at(394.0, "end", exit_code=1, seconds=394.0),
        at(
            520.0, "start", 1, nodes=["pre-3"], num_nodes=1, resume_from=f"{CKPT}00000400", step=400
        ),
    ]
    lost = status(recs).attempts[0]
    assert lost.unseen is not None and lost.unseen.rate == pytest.approx(2.0) and lost.lost == "~12"


def test_an_attempt_with_one_save_takes_the_pace_of_the_runs_other_attempts() -> None:
    recs = [r for r in scene() if r.get("attempt") or r.get("step") != 200]
    lost = status(recs).attempts[0]
    # attempt 1's pace: 200 steps in 80 s (its flush's commit of step 400 is no save of it)
    assert lost.unseen is not None and lost.unseen.rate == pytest.approx(2.5) and lost.lost == "~15"


def test_no_pace_anywhere_is_unknown() -> None:
    recs = [r for r in scene() if r["event"] not in ("saved", "checkpoint")]
    assert [a.lost for a in status(recs).attempts] == ["-", "-"]


def test_a_hand_over_from_a_notice_save_on_the_nodes_lost_nothing() -> None:
    """With `local_dir`, the notice save is `saved` on the nodes, and its commit in the
    folder comes with the flush, about 90 s after the hand-over (or never): until then the
    attempt that handed over lost 0 steps, not an estimate of the steps after its save."""
    recs = [
        {"event": "submitted", "job": "31", "name": "big", "time": T0 - 5},
        at(0, "start", nodes=["pre-1"], num_nodes=1, world_size=1, resume_from=None, step=None),
        saved(101.0, 200),
        at(
            120.0,
            "notice",
            kind="drain",
            node="pre-1",
            reason="preempted",
            first=True,
            seen_at=T0 + 120,
        ),
        {**saved(121.0, 245), "after_notice": True},
        at(
            122.0,
            "successor",
            successor="32",
            excluded=["pre-1"],
            why="drain",
            submitted_at=T0 + 122,
        ),
        at(140.0, "end", exit_code=0, seconds=140.0),
        {
            **at(
                0,
                "start",
                0,
                nodes=["pre-2"],
                num_nodes=1,
                world_size=1,
                resume_from="/tmp/l/32-0/step-00000245",
                step=245,
            ),
            "job": "32",
            "time": T0 + 135.0,
        },
    ]
    st = job_status("31", "big", "/c/big", [Record.from_json(r) for r in recs], None,
                    now=T0 + 200)  # fmt: skip
    handed = st.attempts[0]
    assert (handed.checkpoint_step, handed.steps_lost, handed.unseen) == (245, 0, None)
