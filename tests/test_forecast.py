"""`slurmpre plan --deadline`: each policy replayed over traces drawn from the measured
(or given) preemptions and waits, for a real ledger and for given rates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from slurmpre.errors import UsageError
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import Checkpoint, End, Notice, Start, Submitted, Successor
from slurmpre.login.forecast import Asked, forecast

from tests.conftest import slurmpre_cli

T0 = 1_800_000_000.0
H = 3600.0
GIVEN = ["--total-steps", "100000", "--rate", "4", "--mtbf", "7200", "--wait-seconds", "1800",
         "--restart-seconds", "120", "--checkpoint-seconds", "30",
         "--gpus-per-node", "8"]  # fmt: skip


def a_run(folder: Path) -> None:
    """Two jobs: 2 h of training at 5 steps/s, a drain, a successor 300 s later."""
    ledger = Ledger(folder)
    ledger.ensure()
    for r in (
        Submitted(job="1", name="tiny", time=T0),
        Start(job="1", attempt=0, nodes=("a", "b"), num_nodes=2, step=0, time=T0 + 60),
        Checkpoint(job="1", attempt=0, step=36000, path="p", after_notice=True, seconds=40.0,
                   time=T0 + 60 + 2 * H),
        Notice(job="1", attempt=0, kind="drain", node="a", reason="x", seen_at=T0 + 60 + 2 * H,
               first=True, step_at_notice=36000),
        Successor(job="1", attempt=0, successor="2", excluded=("a",), why="x",
                  submitted_at=T0 + 60 + 2 * H),
        End(job="1", attempt=0, exit_code=0, seconds=2 * H),
        Start(job="2", attempt=0, nodes=("b", "c"), num_nodes=2, step=36000,
              time=T0 + 360 + 2 * H),
    ):  # fmt: skip
        ledger.append(r)


def test_a_real_ledger_gives_every_figure_and_a_fixed_seed_gives_the_same_answer(
    tmp_path: Path,
) -> None:
    a_run(tmp_path)
    asked = Asked(deadline="10h", total_steps=100_000, traces=50, seed=7, gpus_per_node=8)
    got = forecast([tmp_path], asked, now=T0 + 2.1 * H)
    s = got.scene
    assert s.work_s == pytest.approx((100_000 - 36_000) / 5)  # the measured rate
    assert s.deadline_s == pytest.approx(10 * H - 2.1 * H)  # from the first submission
    assert s.restart_s == pytest.approx(300) and s.down_s == pytest.approx(300)
    assert s.up_s == pytest.approx(2 * H) and s.checkpoint_s == 40
    assert got.nodes == 2
    again = forecast([tmp_path], asked, now=T0 + 2.1 * H)
    assert again.results == got.results
    std, fb = got.results["always-standard"], got.results["fallback"]
    assert std["chance"] == 1.0 and fb["chance"] == 1.0 and fb["cost"] < std["cost"]


def test_given_rates_need_no_ledger_and_print_each_policy() -> None:
    proc = slurmpre_cli("plan", "--deadline", "12h", *GIVEN, "--seed", "3", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["seed"] == 3 and set(doc["policies"]) == {
        "always-preemptible", "always-standard", "fallback"
    }  # fmt: skip
    assert doc["policies"]["always-standard"]["chance"] == 1.0
    text = slurmpre_cli("plan", "--deadline", "12h", *GIVEN, "--seed", "3").stdout
    assert "seed 3" in text and "fallback" in text and "makes it" in text


@pytest.mark.parametrize(
    ("args", "named"),
    [(["--deadline", "soon", *GIVEN], "'soon'"),
     (["--deadline", "2020-01-01T00:00", *GIVEN], "already past"),
     (["--deadline", "8h", *GIVEN[2:]], "--total-steps"),
     (["--deadline", "8h", *GIVEN[:2]], "--rate"),
     (["--deadline", "8h", *GIVEN[:3], "-4", *GIVEN[4:]], "--rate -4"),
     (["--deadline", "8h", *GIVEN, "--traces", "0"], "--traces")],
)  # fmt: skip
def test_bad_input_is_one_line_and_exit_2(args: list[str], named: str) -> None:
    proc = slurmpre_cli("plan", *args)
    assert proc.returncode == 2, proc.stderr
    assert named in proc.stderr and "Traceback" not in proc.stderr


def test_a_folder_without_a_ledger_is_named(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="has no ledger"):
        forecast([tmp_path], Asked(deadline="1h", total_steps=10))


def _policies(*args: str) -> tuple[dict[str, float], str]:
    doc = slurmpre_cli("plan", "--deadline", "12h", *args, "--seed", "3", "--json")
    assert doc.returncode == 0, doc.stderr
    text = slurmpre_cli("plan", "--deadline", "12h", *args, "--seed", "3")
    found = json.loads(doc.stdout)
    return {p: r["cost"] for p, r in found["policies"].items()}, text.stdout


def test_costs_carry_the_currency_and_a_node_its_own_gpus(tmp_path: Path) -> None:
    rates = GIVEN[:-2]  # without its --gpus-per-node
    eight, text = _policies(*rates, "--gpus-per-node", "8")
    standard = next(line for line in text.splitlines() if line.startswith("always-standard"))
    assert f"${eight['always-standard']:,.2f}" in standard
    assert "cost at $16.00 a standard node-hour (8 GPU(s))" in text
    four, text = _policies(*rates, "--gpus-per-node", "4")
    assert four["always-standard"] == pytest.approx(eight["always-standard"] / 2)
    assert "$8.00 a standard node-hour (4 GPU(s))" in text
    spec = tmp_path / "job.toml"
    spec.write_text('command = ["python", "t.py"]\nnodes = "2-4"\ngpus_per_node = 4\n')
    from_spec, _ = _policies(*rates, "--spec", str(spec))
    assert from_spec == four
    spec.write_text('command = ["python", "t.py"]\nnodes = 2\ngpus = 8\n')
    assert _policies(*rates, "--spec", str(spec))[0] == four  # 8 GPUs over 2 nodes
    spec.write_text('command = ["python", "t.py"]\nnodes = 2\n')
    assert "(no GPU: priced per node-hour)" in _policies(*rates, "--spec", str(spec))[1]


@pytest.mark.parametrize(
    ("args", "named"),
    [([], "give --gpus-per-node N, or --spec"),
     (["--gpus-per-node", "-1"], "--gpus-per-node -1: must be from 0 to 1024"),
     (["--spec", "no-such.toml"], "'no-such.toml' does not exist")],
)  # fmt: skip
def test_no_node_is_assumed_to_hold_8_gpus(args: list[str], named: str) -> None:
    rates = GIVEN[:-2]  # without its --gpus-per-node
    proc = slurmpre_cli("plan", "--deadline", "12h", *rates, *args)
    assert proc.returncode == 2, proc.stderr
    assert named in proc.stderr and "Traceback" not in proc.stderr
