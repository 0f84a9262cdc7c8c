"""`slurmpre plan` prices the state off the node: a preemption costs the save on the
nodes and the pull, not the write to the shared volume; a write that does not fit in the
window no longer rules just in time out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import Checkpoint, Pulled, Saved
from slurmpre.login import tier_costs
from slurmpre.login.plan import Given, Inputs, inputs_from, make_plan, measure
from slurmpre.login.tier_costs import TierCosts

from tests.conftest import slurmpre_cli


def test_a_30b_write_that_cannot_fit_fits_once_it_leaves_the_node_by_the_network() -> None:
    inputs = Inputs(checkpoint_s=600, mtbf_s=7200, restart_s=10, tier=TierCosts(3, 9))
    plan = make_plan(inputs)
    assert not plan.jit_fits  # 600 s of write in a 300 s window
    row = tier_costs.row(plan.inputs, inputs.tier)  # type: ignore[arg-type]
    assert row.fits and row.goodput == pytest.approx(7200 / (7200 + 3 + 9 + 10))
    assert row.cost == pytest.approx(2.0 * 0.5 / row.goodput)  # type: ignore[operator]


def test_a_save_and_pull_longer_than_the_window_do_not_fit() -> None:
    plan = make_plan(Inputs(checkpoint_s=90, mtbf_s=7200, restart_s=10, tier=TierCosts(200, 90)))
    assert tier_costs.row(plan.inputs, TierCosts(200, 90)).goodput is None


def test_the_ledger_gives_the_save_the_pull_and_the_flush_as_the_write(tmp_path: Path) -> None:
    folder = tmp_path / "ckpt"
    folder.mkdir()
    ledger = Ledger(folder)
    ledger.ensure()
    for step, save, flush in ((5, 1.0, 95.0), (10, 2.0, 97.0), (15, 1.5, 96.0)):
        ledger.append(
            Saved(
                job="3", attempt=0, step=step, path="/dev/shm/x", seconds=save, after_notice=False
            )
        )
        ledger.append(
            Checkpoint(
                job="3",
                attempt=0,
                step=step,
                path=str(folder),
                seconds=save,
                after_notice=False,
                flush_seconds=flush,
            )
        )
    ledger.append(Pulled(job="4", attempt=0, node=0, step=15, ok=True, seconds=4.0, bytes=1))
    ledger.append(Pulled(job="4", attempt=0, node=1, step=15, ok=False, seconds=0.1, bytes=0))
    assert measure(ledger.records()).checkpoint_s == 96.0  # the write is the flush's
    got = inputs_from([folder], Given(mtbf_s=3600, restart_s=5))
    assert got.tier == TierCosts(1.5, 4.0, 96.0)
    assert "save on the nodes 1.5 s" in got.sources and "pull 4 s" in got.sources
    out = slurmpre_cli(
        "plan",
        str(folder),
        "--mtbf",
        "3600",
        "--restart-seconds",
        "5",
        "--pull-seconds",
        "2",
        check=True,
    ).stdout
    assert (
        "state off the node: save on the nodes 1.5 s, pull 2 s, flush 96 s in the background" in out
    )
    assert "preemptible, just in time + local_dir" in out
    doc = json.loads(
        slurmpre_cli(
            "plan", str(folder), "--mtbf", "3600", "--restart-seconds", "5", "--json", check=True
        ).stdout
    )
    assert doc["state_off_the_node"]["pull_seconds"] == 4.0


def test_a_run_without_the_tier_has_no_such_row(tmp_path: Path) -> None:
    out = slurmpre_cli(
        "plan", "--checkpoint-seconds", "90", "--mtbf", "3600", "--restart-seconds", "5", check=True
    ).stdout
    assert "local_dir" not in out and "state off the node" not in out
