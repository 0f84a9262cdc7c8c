"""What a training script sees of a hand-over (slurmpre.api): the notice's two levels,
and a successor's resume_path() that waits for its predecessor to end."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

import pytest
import slurmpre
from slurmpre import api
from slurmpre.errors import CheckpointError
from slurmpre.folder.layout import FolderLayout
from slurmpre.folder.ledger import Choice, Ledger
from slurmpre.folder.records import Checkpoint, Start, Waiting
from slurmpre.job.watch.notice import Notice, NoticeGate, write_notice

from tests.conftest import as_a_job, wait_for


def notice(path: Path, *, stop: bool) -> None:
    write_notice(path, Notice("drain", "n1", "preempted", time.time(), stop=stop))


def test_a_script_that_goes_on_saves_at_the_notice_and_stops_when_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = as_a_job(monkeypatch, tmp_path, "42")
    Ledger(tmp_path).ensure()

    def step() -> tuple[bool, bool]:
        return slurmpre.checkpoint_requested(), slurmpre.preemption_requested()

    assert step() == (False, False)
    notice(path, stop=False)
    assert step() == (True, False)  # save, and go on
    assert step() == (False, False)  # once
    notice(path, stop=True)
    assert step() == (False, True)  # save, and stop
    layout = FolderLayout(tmp_path)
    assert layout.goes_on("42", 0).exists() and layout.taken("42", 0).exists()
    with slurmpre.checkpoint(9) as saved:
        (saved / "w").write_text("9")
    # The ledger says this save is the one the script stops at (the next step, started
    # beside this one, need not wait for the training's teardown).
    (last,) = [r for r in Ledger(tmp_path).records() if isinstance(r, Checkpoint)]
    assert last.after_notice and last.stopping


def test_a_save_at_the_notice_that_goes_on_is_not_the_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = as_a_job(monkeypatch, tmp_path, "42")
    Ledger(tmp_path).ensure()
    notice(path, stop=False)
    assert (slurmpre.checkpoint_requested(), slurmpre.preemption_requested()) == (True, False)
    with slurmpre.checkpoint(7) as saved:
        (saved / "w").write_text("7")
    (first,) = [r for r in Ledger(tmp_path).records() if isinstance(r, Checkpoint)]
    assert first.after_notice and not first.stopping


def test_a_script_that_only_listens_stops_at_either_level(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = as_a_job(monkeypatch, tmp_path, "42")
    Ledger(tmp_path).ensure()
    assert slurmpre.preemption_requested() is False
    notice(path, stop=False)
    assert slurmpre.preemption_requested() is True
    assert not FolderLayout(tmp_path).goes_on("42", 0).exists()


def test_a_stop_at_once_is_one_save_not_two(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = as_a_job(monkeypatch, tmp_path, "42")
    Ledger(tmp_path).ensure()
    assert (slurmpre.checkpoint_requested(), slurmpre.preemption_requested()) == (False, False)
    notice(path, stop=True)  # a requeue or in-place restart: no successor to go on for
    assert (slurmpre.checkpoint_requested(), slurmpre.preemption_requested()) == (False, True)


def test_two_calls_a_step_still_agree_about_once_a_second() -> None:
    """A script that asks both questions calls the gate twice per step, the second at
    once after the first: the gate must not read that as steps of no time and sync only
    every hundred calls (found on the sandbox: 50 s late at 1 s steps)."""
    now = [0.0]
    syncs: list[int] = []
    seen = {"level": 0}

    def agree(flag: int, every: int) -> tuple[int, int]:
        syncs.append(gate.syncs.calls)
        return flag, every

    gate = NoticeGate(
        lambda: "notice", clock=lambda: now[0], level=lambda _: seen["level"], check_every=0.0
    )
    for step in range(300):
        if step == 20:
            seen["level"] = 1
        levels = [gate.agree(agree), gate.agree(agree)]
        if max(levels) >= 1:
            break
        now[0] += 0.3  # 300 ms steps
    assert 20 <= step <= 20 + 5  # within about a second (and a sync) of the notice
    assert len(syncs) < 30  # amortised all the same


# -- a successor's resume_path() --------------------------------------------------
def as_a_successor(monkeypatch: pytest.MonkeyPatch, folder: Path) -> Ledger:
    as_a_job(monkeypatch, folder, "77")
    monkeypatch.setenv("SLURMPRE_RESUME_PENDING", "42")
    monkeypatch.setenv("SLURMPRE_RESUME_TIMEOUT", "30")
    monkeypatch.setattr(api.attempt, "_taken", {})
    ledger = Ledger(folder)
    ledger.ensure()
    return ledger


def chosen(folder: Path, step: int | None) -> Choice:
    return Choice(
        job="77",
        attempt=0,
        resume_from=None if step is None else str(folder / f"step-{step:08d}"),
        step=step,
        nodes=("n2",),
        world_size=1,
        previous_world_size=2,
        rdzv_endpoint="n2:29500",
        published_at=time.time(),
    )


def test_a_successors_resume_path_says_it_waits_then_answers_once_chosen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = as_a_successor(monkeypatch, tmp_path)
    (tmp_path / "step-00000030").mkdir()
    answers: list[object] = []
    errors: list[BaseException] = []

    def train() -> None:
        try:
            answers.append((slurmpre.resume_path(), slurmpre.resume_step()))
            answers.append(slurmpre.previous_world_size())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's own thread
            errors.append(exc)

    thread = threading.Thread(target=train)
    thread.start()

    def waiting() -> bool:
        return any(isinstance(r, Waiting) and r.predecessor == "42" for r in ledger.records())

    wait_for("the Waiting record", waiting, timeout=30)
    time.sleep(0.3)
    assert answers == []  # still waiting: nothing chosen yet
    ledger.publish(chosen(tmp_path, 30), resume=True)
    thread.join(30)
    if errors:
        raise errors[0]
    assert answers == [(tmp_path / "step-00000030", 30), 2]


def test_a_successor_writes_no_checkpoint_before_its_predecessor_has_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = as_a_successor(monkeypatch, tmp_path)
    monkeypatch.setenv("SLURMPRE_RESUME_TIMEOUT", "0.5")
    with (
        pytest.raises(CheckpointError, match=r"waiting 0\.5 s for job 42"),
        slurmpre.checkpoint(5) as path,
    ):
        (path / "w").write_text("x")
    assert not list(tmp_path.glob("step-*")) and not list(tmp_path.glob(".incoming-*"))
    assert not any(isinstance(r, Start) for r in ledger.records())
    # Once the checkpoint is chosen, it writes.
    ledger.publish(dataclasses.replace(chosen(tmp_path, None)), resume=True)
    with slurmpre.checkpoint(5) as path:
        (path / "w").write_text("x")
    assert (tmp_path / "step-00000005" / "w").exists()


# -- who may take over early ------------------------------------------------------
def test_only_a_script_that_meets_at_resume_path_is_started_before_its_predecessor_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A successor of a script that picks its checkpoint by itself would load one, and
    train, while its predecessor still trains on the same folder: its launch waits. The
    predecessor's resume_path() (or resume_step()) is what says the script meets there."""
    from slurmpre.job.start.args import parse_args
    from slurmpre.job.start.env import JobEnv
    from slurmpre.job.start.launch import takes_over_early

    opts = parse_args(["--checkpoint-dir", str(tmp_path), "--", "python", "train.py"])
    successor = JobEnv("77", 0, 0, ("n2",), "n2", 0, predecessor="42")
    Ledger(tmp_path).ensure()
    assert not takes_over_early(opts, successor, tmp_path)  # job 42's script never asked

    as_a_job(monkeypatch, tmp_path, "42")
    monkeypatch.setattr(api.attempt, "_marked_resume", set())
    assert slurmpre.resume_step() is None  # job 42's script asks: a fresh start
    assert FolderLayout(tmp_path).meets_at_resume("42").exists()
    assert takes_over_early(opts, successor, tmp_path)
    with_arg = dataclasses.replace(opts, resume_arg="--resume")
    assert not takes_over_early(with_arg, successor, tmp_path)  # the path is on its command
    assert not takes_over_early(opts, dataclasses.replace(successor, predecessor=None), tmp_path)
