"""`slurmpre plan`: Young/Daly interval, goodput and cost, against values computed by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from slurmpre.errors import UsageError
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import Record
from slurmpre.login.plan import Given, Inputs, inputs_from, make_plan, measure

from tests.conftest import slurmpre_cli
from tests.records import record

# (checkpoint s, mtbf s, restart s) -> Young, Daly, periodic goodput, just-in-time goodput,
# periodic and just-in-time cost per useful GPU-hour at $2.00 on demand, 50 % off.
# Worked by hand (docs/plan.md shows the first one step by step).
HAND = [
    ((60, 14400, 300), 1314.53, 1274.84, 0.89268, 0.97561, 1.1202, 1.0250),
    # a 10-minute checkpoint cannot fit in 300 s - 30 s: no just in time
    ((600, 7200, 600), 2939.39, 2553.00, 0.59373, None, 1.6843, None),
    # d >= 2M: Daly's interval is M itself; goodput 1 / (e^3.5 - 1)
    ((100, 40, 0), 89.44, 40.00, 0.03114, 0.28571, 32.1155, 3.5000),
    # a free checkpoint: only the restart costs
    ((0, 1000, 100), 0.00, 0.00, 0.90909, 0.90909, 1.1000, 1.1000),
]


@pytest.mark.parametrize(("given", "young", "daly", "periodic", "jit", "p_cost", "j_cost"), HAND)
def test_matches_hand_computed_values(
    given: tuple[float, float, float],
    young: float,
    daly: float,
    periodic: float,
    jit: float | None,
    p_cost: float,
    j_cost: float | None,
) -> None:
    plan = make_plan(Inputs(*given))
    assert plan.young_interval_s == pytest.approx(young, abs=0.01)
    assert plan.daly_interval_s == pytest.approx(daly, abs=0.01)
    assert plan.periodic_goodput == pytest.approx(periodic, abs=1e-4)
    assert plan.periodic_cost == pytest.approx(p_cost, abs=1e-3)
    if jit is None:
        assert not plan.jit_fits and plan.jit_goodput is None and plan.jit_cost is None
    else:
        assert plan.jit_goodput == pytest.approx(jit, abs=1e-5)
        assert plan.jit_cost == pytest.approx(j_cost, abs=1e-3)
    assert plan.on_demand_cost == 2.0


@pytest.mark.parametrize(
    ("field", "value", "flag"),
    [
        ("mtbf_s", 0.0, "--mtbf"),
        ("checkpoint_s", -1.0, "--checkpoint-seconds"),
        ("restart_s", float("nan"), "--restart-seconds"),
        ("price", float("inf"), "--price"),
        ("discount", 1.0, "--discount"),
    ],
)
def test_impossible_inputs_are_refused_by_name(field: str, value: float, flag: str) -> None:
    base = {"checkpoint_s": 60.0, "mtbf_s": 3600.0, "restart_s": 60.0}
    with pytest.raises(UsageError, match=flag):
        make_plan(Inputs(**{**base, field: value}))  # type: ignore[arg-type]


def ledger_records() -> list[Record]:
    """Two attempts of job 9: 1000 s, a drain, a requeue, 80 s later a start, 500 s more."""
    return [
        record(r)
        for r in (
            {"event": "start", "job": "9", "attempt": 0, "time": 0.0},
            {"event": "checkpoint", "job": "9", "attempt": 0, "seconds": 10.0},
            {"event": "notice", "job": "9", "attempt": 0, "kind": "drain", "first": True},
            {"event": "notice", "job": "9", "attempt": 0, "kind": "drain", "first": False},
            {"event": "checkpoint", "job": "9", "attempt": 0, "seconds": 14.0},
            {"event": "requeued", "job": "9", "attempt": 0, "requeued_at": 1000.0},
            {"event": "end", "job": "9", "attempt": 0, "seconds": 1000.0},
            {"event": "start", "job": "9", "attempt": 1, "time": 1080.0},
            {"event": "notice", "job": "9", "attempt": 1, "kind": "time-limit"},
            {"event": "checkpoint", "job": "9", "attempt": 1, "seconds": 12.0},
            {"event": "end", "job": "9", "attempt": 1, "seconds": 500.0},
        )
    ]


def test_measures_what_the_ledger_holds() -> None:
    seen = measure(ledger_records())
    assert seen.checkpoint_s == 12.0  # the median write
    assert seen.preemptions == 1  # the time-limit warning is no preemption
    assert seen.mtbf_s == 1500.0  # running seconds per preemption
    assert seen.restart_s == 80.0


def test_cli_reads_ledgers_and_options_win(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    ledger.ensure()
    for r in ledger_records():
        ledger.append(r)
    proc = slurmpre_cli("plan", str(tmp_path), "--json", "--restart-seconds", "300")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["inputs"]["checkpoint_seconds"] == 12.0
    assert doc["inputs"]["restart_seconds"] == 300.0
    assert doc["inputs"]["mtbf_seconds"] == 1500.0
    assert set(doc) == {
        "schema",
        "inputs",
        "periodic",
        "just_in_time",
        "on_demand_cost_per_gpu_hour",
    }
    text = slurmpre_cli("plan", str(tmp_path)).stdout
    assert "preemptible, just in time (slurmpre)" in text and "measured: " in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--checkpoint-seconds", "60", "--restart-seconds", "60"], "give --mtbf"),
        (["--checkpoint-seconds", "60", "--mtbf", "-5", "--restart-seconds", "1"], "--mtbf -5"),
        (["/nonexistent/folder"], "has no ledger"),
        # Every input missing is named at once, not one per try.
        (["--restart-seconds", "60"], "give --checkpoint-seconds --mtbf"),
        (
            ["--deadline", "8h", "--rate", "2"],
            "give --total-steps --mtbf --restart-seconds --wait-seconds --checkpoint-seconds",
        ),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(args: list[str], message: str) -> None:
    proc = slurmpre_cli("plan", *args)
    assert proc.returncode == 2
    assert message in proc.stderr and len(proc.stderr.splitlines()) == 1


def successor_run() -> list[Record]:
    """A one-node job handed over to a successor (restart = "successor", the default):
    submitted at 500, the successor's training started at 507."""
    return [
        record(r)
        for r in (
            {"event": "start", "job": "20", "attempt": 0, "time": 0.0},
            {"event": "checkpoint", "job": "20", "attempt": 0, "seconds": 4.0},
            {"event": "notice", "job": "20", "attempt": 0, "kind": "drain", "first": True},
            {
                "event": "successor",
                "job": "20",
                "attempt": 0,
                "successor": "21",
                "excluded": ["n1"],
                "why": None,
                "submitted_at": 500.0,
            },
            {"event": "end", "job": "20", "attempt": 0, "seconds": 504.0},
            {"event": "start", "job": "21", "attempt": 0, "time": 507.0},
            {"event": "end", "job": "21", "attempt": 0, "seconds": 100.0},
        )
    ]


def test_a_successor_is_a_restart_measured_from_its_submission_to_its_start() -> None:
    seen = measure(successor_run())
    assert (seen.restart_s, seen.restarts, seen.preemptions) == (7.0, 1, 1)
    both = measure(ledger_records() + successor_run())
    assert (both.restart_s, both.restarts) == (43.5, 2)  # the median of 80 and 7


def ledger_in(folder: Path, records: list[Record]) -> Path:
    ledger = Ledger(folder)
    ledger.ensure()
    for r in records:
        ledger.append(r)
    return folder


def test_without_a_restart_measured_the_users_other_jobs_then_slurms_floor(
    tmp_path: Path,
) -> None:
    """`plan` with no ledger, or one without a restart, takes the restart time the user's
    other jobs measured (a successor's start, here), then the running Slurm's requeue
    floor, each named under `measured:`; what the user gives always wins."""
    other = ledger_in(tmp_path / "other", successor_run())
    plain = ledger_in(tmp_path / "plain", ledger_records()[:2])  # no restart in it
    given = Given(checkpoint_s=10.0, mtbf_s=3600.0)
    asked: list[str] = []

    def floor() -> int:
        asked.append("floor")
        return 121

    found = inputs_from([], given, floor, lambda: [tmp_path / "gone", other])
    assert found.restart_s == 7.0 and asked == []
    assert any("your other jobs measured" in s for s in found.sources)
    found = inputs_from([plain], given, floor, lambda: [plain, tmp_path / "gone"])
    assert found.restart_s == 121.0 and asked == ["floor"]
    assert any("requeue floor" in s for s in found.sources)
    found = inputs_from([], Given(checkpoint_s=10.0, mtbf_s=3600.0, restart_s=30.0), floor,
                        lambda: [other])  # fmt: skip
    assert found.restart_s == 30.0 and asked == ["floor"]
    with pytest.raises(UsageError, match="give --restart-seconds"):
        inputs_from([], given, lambda: None, lambda: [])


def test_cli_plan_without_a_folder_takes_the_restart_from_the_users_jobs(tmp_path: Path) -> None:
    from slurmpre.login import jobs

    other = ledger_in(tmp_path / "mine", successor_run())
    state = {"XDG_STATE_HOME": str(tmp_path / "state")}  # this user's list: this job only
    entry = jobs.Submitted("20", "mine", str(other), str(other / "logs"), 1.0)
    jobs.remember(entry, jobs.index_path(state))
    proc = slurmpre_cli("plan", "--checkpoint-seconds", "10", "--mtbf", "3600", "--json", env=state)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["inputs"]["restart_seconds"] == 7.0
    assert any("your other jobs" in s for s in doc["inputs"]["measured"])


# -- spares (`plan --spares K`) -------------------------------------------------------------
def test_spares_rows_match_hand_computed_values() -> None:
    """N = 4, K = 1, M = 7200 s, d = 10, R = 600 (a wait for a free node), S = 10, T = 1800,
    $2 at half price. Hand over: goodput 7200/7810. Shrink: 4*7200 - 1800 useful over that
    + 4 * (10+10+10+600) held. Spares: s = 1/(1 + 1/4) = 0.8, f = 0.8/1.8 = 4/9 swaps, lost
    = 4/9 * 20 + 5/9 * 610 = 347.78 s, held (4 + 0.8/3.6) * (7200 + 347.78) per 4 * 7200."""
    from slurmpre.login.spares import SparesInputs, ways

    given = SparesInputs(4, 1, 7200.0, 10.0, 600.0, 10.0, 1800.0, 2.0, 0.5)
    hand, shrink, spare = ways(given)
    assert hand.goodput == pytest.approx(7200 / 7810)
    assert shrink.goodput == pytest.approx((28800 - 1800) / (28800 - 1800 + 4 * 630))
    assert shrink.wall == pytest.approx((7200 + 630 + 1800 / 4) / 7200)
    lost = 4 / 9 * 20 + 5 / 9 * 610
    assert spare.wall == pytest.approx((7200 + lost) / 7200)
    assert spare.goodput == pytest.approx(28800 / ((4 + 0.8 / 3.6) * (7200 + lost)))
    assert spare.cost == pytest.approx(1.0 / spare.goodput)
    # A wait for a free node makes the spare the fastest way, at a price: it is held.
    assert spare.wall < shrink.wall and spare.wall < hand.wall
    one = ways(SparesInputs(1, 1, 7200.0, 10.0, 600.0, 10.0, 1800.0, 2.0, 0.5))
    assert one[1].goodput is None and one[1].why == "one node cannot shrink"


def test_cli_plan_spares_measures_the_swap_and_the_return_in_the_ledger(tmp_path: Path) -> None:
    """A 2-4 job shrank in place at 1000 (its next step started 6 s after the request) and
    grew back at 2200: the in-place restart 6 s, the capacity back after 1200 s."""
    ledger = Ledger(tmp_path)
    ledger.ensure()
    for r in (
        *ledger_records(),
        {"event": "start", "job": "30", "attempt": 0, "nodes": ["a", "b", "c"], "time": 900.0},
        # An early request (make before break in place) is not the swap: it trains on.
        {"event": "in_place_requested", "job": "30", "attempt": 0, "keep": ["a", "b"],
         "release": ["c"], "why": "x", "requested_at": 980.0, "early": True, "time": 980.0},
        {"event": "in_place_requested", "job": "30", "attempt": 0, "keep": ["a", "b"],
         "release": ["c"], "why": "x", "requested_at": 995.0, "time": 995.0},
        {"event": "in_place", "job": "30", "attempt": 0, "kept": ["a", "b"], "released": ["c"],
         "release_s": 0.2, "requested_at": 995.0, "released_at": 1000.0, "why": "x",
         "time": 1000.0},
        {"event": "start", "job": "30", "attempt": 0, "in_place": 1, "nodes": ["a", "b"],
         "time": 1001.0},
        {"event": "notice", "job": "30", "attempt": 0, "in_place": 1, "kind": "grow",
         "node": None, "reason": "grow", "seen_at": 2200.0, "first": True, "time": 2200.0},
    ):  # fmt: skip
        ledger.append(r if isinstance(r, Record) else record(r))
    proc = slurmpre_cli("plan", str(tmp_path), "--spares", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    inputs = json.loads(proc.stdout)["spares"]["inputs"]
    assert (inputs["nodes"], inputs["spares"]) == (2, 2)
    assert (inputs["swap_s"], inputs["return_s"]) == (6.0, 1200.0)
    text = slurmpre_cli("plan", str(tmp_path), "--spares", "2", "--return-seconds", "60").stdout
    assert "capacity back 60 s after a loss" in text and "2 spare(s), swapped in place" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--spares", "1", "--nodes", "2", "--swap-seconds", "5"], "give --return-seconds"),
        (["--spares", "1", "--nodes", "2", "--return-seconds", "5"], "give --swap-seconds"),
        (["--spares", "0"], "--spares"),
        (["--spares", "1", "--nodes", "0", "--swap-seconds", "1", "--return-seconds", "1"],
         "--nodes 0: must be 1 or more"),
        (["--spares", "1", "--nodes", "2", "--swap-seconds", "nan", "--return-seconds", "1"],
         "--swap-seconds nan"),
    ],
)  # fmt: skip
def test_cli_plan_spares_bad_input_is_one_line_exit_2(args: list[str], message: str) -> None:
    base = ["--checkpoint-seconds", "10", "--mtbf", "7200", "--restart-seconds", "60"]
    proc = slurmpre_cli("plan", *base, *args)
    assert proc.returncode == 2, proc.stdout
    assert message in proc.stderr and len(proc.stderr.splitlines()) == 1
