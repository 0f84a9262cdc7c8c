"""The restart cap and the crash-loop guard (`slurmpre.job.start.limits`), and node 0 giving up
before it chooses: recorded, made non-requeueable, exit 1."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from slurmpre.errors import RestartLimit
from slurmpre.folder.layout import FolderLayout
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import AttemptId
from slurmpre.job.start.args import parse_args
from slurmpre.job.start.env import JobEnv
from slurmpre.job.start.limits import Causes, Limits, causes, give_up_why, stalled
from slurmpre.job.start.resume import AttemptContext, agree

from tests.fakes import FakeSlurm
from tests.records import record


def attempt(
    job: str, n: int, started_at: int | None, *, in_place: int = 0, chose: bool = True
) -> list[dict[str, Any]]:
    """An attempt that started from the checkpoint of step ``started_at`` (None: none),
    or crashed before it chose one."""
    out: list[dict[str, Any]] = []
    if chose:
        out.append({"event": "start", "job": job, "attempt": n, "in_place": in_place,
                    "step": started_at})  # fmt: skip
    out.append({"event": "end", "job": job, "attempt": n, "in_place": in_place, "exit_code": 1})
    return out


def typed(recs: list[dict[str, Any]]) -> list[Any]:
    return [record(r) for r in recs]


def test_attempts_that_started_from_the_newest_checkpoint_saved_nothing() -> None:
    """Judged by the folder, whoever wrote to it: attempt 0 began at step 100 and is
    followed by a newer one (200), so it saved; 1 and 1.1 began at 200, still the newest."""
    recs = [*attempt("1", 0, 100), *attempt("1", 1, 200), *attempt("1", 1, 200, in_place=1)]
    assert stalled(typed(recs), "1", AttemptId(2), 200) == 2
    assert stalled(typed(recs), "1", AttemptId(2), 300) == 0  # 1.1 saved 300 (its own way)
    assert stalled([], "1", AttemptId(0), None) == 0  # a first attempt
    fresh = [*attempt("1", 0, None), *attempt("1", 1, None, chose=False)]
    assert stalled(typed(fresh), "1", AttemptId(2), None) == 2  # nothing, ever


def test_the_count_goes_on_across_the_jobs_of_a_run() -> None:
    """Job 2 took over from job 1 and job 3 from job 2: job 3's first attempt looks back
    through both; another run's attempts in the same folder do not count."""
    recs = [
        *attempt("1", 0, 50),
        {"event": "successor", "job": "1", "attempt": 0, "successor": "2", "excluded": [],
         "why": "x", "submitted_at": 0.0},
        *attempt("2", 0, 50),
        {"event": "successor", "job": "2", "attempt": 0, "successor": "3", "excluded": [],
         "why": "x", "submitted_at": 0.0},
        *attempt("9", 0, 10),
    ]  # fmt: skip
    assert stalled(typed(recs), "3", AttemptId(0), 50) == 2
    assert give_up_why(typed(recs), "3", AttemptId(0), 50, 2, Limits(100, 2)) is not None
    assert give_up_why(typed(recs), "3", AttemptId(0), 50, 2, Limits(100, 3)) is None
    assert give_up_why(typed(recs), "3", AttemptId(0), 50, 2, Limits(100, 0)) is None  # 0: never


def test_a_restart_past_max_restarts_gives_up() -> None:
    """Restarts the ledger does not explain count as failures (as before budgets split)."""
    why = give_up_why([], "1", AttemptId(5), None, 5, Limits(4, 3))
    assert why == (
        "5 restarts of the run after a failure is past max_restarts = 4 (preemptions are "
        "counted apart): not restarting again"
    )
    assert give_up_why([], "1", AttemptId(4), None, 4, Limits(4, 3)) is None


def preempted(job: str, n: int) -> list[dict[str, Any]]:
    """An attempt that saw a drain, checkpointed and ended cleanly."""
    return [
        {"event": "start", "job": job, "attempt": n, "step": n * 10},
        {"event": "notice", "job": job, "attempt": n, "kind": "drain", "node": "n1",
         "reason": "preempted", "seen_at": 1.0, "first": True},
        {"event": "end", "job": job, "attempt": n, "exit_code": 0},
    ]  # fmt: skip


def killed(job: str, n: int) -> list[dict[str, Any]]:
    """An attempt killed with its node before anything was seen: no end."""
    return [{"event": "start", "job": job, "attempt": n, "step": n * 10}]


def test_preemptions_never_spend_the_crash_budget() -> None:
    recs = typed([*preempted("1", 0), *killed("1", 1), *preempted("1", 2), *preempted("1", 3)])
    assert causes(recs, "1", AttemptId(4)) == Causes(preemptions=4)
    assert give_up_why(recs, "1", AttemptId(4), 40, 4, Limits(0, 0)) is None  # max_restarts = 0
    why = give_up_why(recs, "1", AttemptId(4), 40, 4, Limits(0, 0), max_preemptions=3)
    assert why is not None and "4 preemptions of the run is past max_preemptions = 3" in why
    assert give_up_why(recs, "1", AttemptId(4), 40, 4, Limits(0, 0), max_preemptions=4) is None


def test_crashes_never_spend_the_preemption_budget() -> None:
    recs = typed([*attempt("1", 0, 0), *attempt("1", 1, 10), *attempt("1", 2, 20)])
    assert causes(recs, "1", AttemptId(3)) == Causes(failures=3)
    assert give_up_why(recs, "1", AttemptId(3), 30, 3, Limits(3, 0), max_preemptions=0) is None
    why = give_up_why(recs, "1", AttemptId(3), 30, 3, Limits(2, 0), max_preemptions=0)
    assert why is not None and "3 restarts of the run after a failure" in why


def test_a_time_limit_is_neither_budget() -> None:
    recs = typed([
        {"event": "start", "job": "1", "attempt": 0, "step": 0},
        {"event": "notice", "job": "1", "attempt": 0, "kind": "time-limit", "node": None,
         "reason": None, "seen_at": 1.0, "first": True},
        {"event": "end", "job": "1", "attempt": 0, "exit_code": 0},
    ])  # fmt: skip
    assert causes(recs, "1", AttemptId(1)) == Causes(other=1)
    assert give_up_why(recs, "1", AttemptId(1), 5, 1, Limits(0, 0), max_preemptions=0) is None


class Requeues(FakeSlurm):
    def __init__(self) -> None:
        self.flags: list[tuple[str, bool]] = []

    def set_requeue(self, job_id: str, requeue: bool) -> None:
        self.flags.append((job_id, requeue))


def test_node_0_gives_up_before_it_chooses(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    ledger.ensure()
    for r in typed(attempt("42", 0, None) + attempt("42", 1, None)):
        ledger.append(r)
    opts = parse_args(["--checkpoint-dir", str(tmp_path), "--max-stalled-restarts", "2", "--",
                       "python", "train.py"])  # fmt: skip
    job = JobEnv("42", 2, 0, ("n1",), "n1", 0)
    slurm = Requeues()
    with pytest.raises(RestartLimit) as caught:
        agree(AttemptContext(opts, job, tmp_path, ledger, slurm, {}))
    assert str(caught.value) == (
        "giving up: the last 2 attempts committed no checkpoint (max_stalled_restarts = 2): "
        "the job cannot progress; see their logs"
    )
    assert caught.value.exit_code == 1
    assert slurm.flags == [("42", False)]  # never requeued again
    gave_up = [r for r in ledger.records() if r.EVENT == "gave_up"]
    assert len(gave_up) == 1 and gave_up[0].attempt == 2
    assert not FolderLayout(tmp_path).choice("42", "2").exists()  # nothing chosen


def test_the_wrapper_checks_its_limits_range() -> None:
    with pytest.raises(Exception, match=r"--max-restarts must be from 0 to 100000, got -1"):
        parse_args(["--checkpoint-dir", "/c", "--max-restarts", "-1", "--", "python"])


def test_a_run_that_has_spent_its_budget_does_not_start_again() -> None:
    """Two node-hours on preemptible nodes of 8 GPUs at $2 per GPU-hour, half price: $16;
    then one on a standard node: $16 more."""
    from slurmpre.job.start.limits import over_budget
    from slurmpre.placement.facts import cost

    t = 1_000_000.0
    recs = typed([
        {"event": "start", "job": "1", "attempt": 0, "nodes": ["p1", "p2"], "step": 0, "time": t},
        {"event": "end", "job": "1", "attempt": 0, "exit_code": 0, "seconds": 3600.0,
         "time": t + 3600},
        {"event": "successor", "job": "1", "attempt": 0, "successor": "2", "excluded": [],
         "why": "x", "submitted_at": t + 3600, "time": t + 3600},
        {"event": "placed", "job": "1", "attempt": 0, "where": "standard", "why": "x",
         "decided_at": t + 3600, "time": t + 3600},
        {"event": "start", "job": "2", "attempt": 0, "nodes": ["s1"], "step": 9,
         "time": t + 3600},
    ])  # fmt: skip
    assert cost(recs[:2], t + 3600, gpus_per_node=8) == pytest.approx(16.0)
    assert cost(recs, t + 7200, gpus_per_node=8) == pytest.approx(32.0)
    assert over_budget(recs, t + 7200, None, 8) is None
    assert over_budget(recs, t + 7200, 40.0, 8) is None
    why = over_budget(recs, t + 7200, 30.0, 8)
    assert why == "the run has cost 32.00 (its node-hours at their prices), max_cost = 30"


def test_a_spare_costs_as_much_as_a_node_that_trains() -> None:
    """One preemptible node training and one held as a spare for an hour, 8 GPUs each at
    $2 per GPU-hour, half price: $16, as two training nodes would cost."""
    from slurmpre.placement.facts import cost

    t = 1_000_000.0
    recs = typed([
        {"event": "start", "job": "1", "attempt": 0, "nodes": ["p1"], "spares": ["p2"],
         "step": 0, "time": t},
        {"event": "end", "job": "1", "attempt": 0, "exit_code": 0, "seconds": 3600.0,
         "time": t + 3600},
    ])  # fmt: skip
    assert cost(recs, t + 3600, gpus_per_node=8) == pytest.approx(16.0)
