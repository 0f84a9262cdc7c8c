"""The watcher's decisions, with one fast-forwarded clock and a scripted Slurm client.

One `Clock` drives the watcher (monotonic and wall time), the ledger's
timestamps and the scripted Slurm; the watcher's wait returns as soon as a
scheduled event fires, as the real inbox does. These are unit tests of the
state machine; the same paths run against the real sandbox in
tests/e2e/test_notice.py.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from slurmpre import lines
from slurmpre.errors import SlurmError
from slurmpre.folder.checkpoints import writing
from slurmpre.folder.layout import FolderLayout
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import AttemptId
from slurmpre.job.handover.inplace import read_request
from slurmpre.job.start.env import JobEnv
from slurmpre.job.start.options import WatchConfig
from slurmpre.job.watch.decide import STILL_STARTING
from slurmpre.job.watch.notice import (
    DrainSource,
    SignalSource,
    read_notice,
)
from slurmpre.job.watch.phases import Clock as WatchClock
from slurmpre.job.watch.watcher import Watcher
from slurmpre.signals import Latch
from slurmpre.slurm.parse import NodeInfo, parse_nodes
from slurmpre.tier import in_place

from tests.conftest import DATA
from tests.fakes import FakeSlurm, Nodes
from tests.records import dicts, record

JOB = JobEnv(
    "42", 0, 0, ("gpu-preemptible-dp-1", "gpu-preemptible-dp-2"), "gpu-preemptible-dp-1", 0
)
CAPTURED = parse_nodes((DATA / "slurm-22.05" / "nodes-one-draining.txt").read_text())
EPOCH = 1_000_000.0


def requeuing(**config: Any) -> WatchConfig:
    """The watcher's settings with Slurm's requeue (these tests; test_successor.py has
    the successor, the default)."""
    return WatchConfig(restart="requeue", **config)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return EPOCH + self.now


class ScriptedSlurm(FakeSlurm):
    """Answers `nodes` from a script of drains (stamped as Slurm does, to the second)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.drains: dict[str, tuple[float, str]] = {}
        self.stamped = True
        self.down_between: tuple[float, float] | None = None
        self.requeued: list[str] = []
        self.queries = 0
        self.requeue_fails = 0

    def nodes(self, names: Sequence[str] = ()) -> list[NodeInfo]:
        self.queries += 1
        now = self.clock.now
        if self.down_between and self.down_between[0] <= now < self.down_between[1]:
            raise SlurmError(
                "command failed (exit 1): scontrol show node -o\n"
                "    Unable to contact slurm controller"
            )
        out = []
        for name in names:
            at = self.drains.get(name)
            drained = at is not None and now >= at[0]
            stamp = math.floor(EPOCH + at[0]) if at is not None and self.stamped else None
            out.append(
                NodeInfo(
                    name,
                    "MIXED",
                    frozenset({"DRAIN"}) if drained else frozenset(),
                    at[1] if drained and at else None,
                    ("preemptible",),
                    reason_time=stamp if drained else None,
                )
            )
        return out

    def requeue(self, job_id: str) -> None:
        if self.requeue_fails:
            self.requeue_fails -= 1
            raise SlurmError("command failed (exit 1): scontrol requeue 42")
        self.requeued.append(job_id)

    def config(self) -> dict[str, str]:
        return {"AuthInfo": "cred_expire=30"}


class Harness:
    def __init__(
        self,
        tmp_path: Path,
        *,
        requeue_allowed: bool = True,
        reason: str | None = None,
        config: WatchConfig | None = None,
        job: JobEnv = JOB,
        env: dict[str, str] | None = None,
    ) -> None:
        self.folder = tmp_path
        self.clock = Clock()
        self.slurm = ScriptedSlurm(self.clock)
        self.said: list[str] = []
        self.latch = Latch(clock=self.clock.wall)
        self.ledger = Ledger(tmp_path, clock=self.clock.wall)
        self.ledger.ensure()
        self.hooks: list[tuple[float, Callable[[], object]]] = []
        self.watcher = Watcher(
            [
                DrainSource(
                    self.slurm,
                    job.allocation,
                    re.compile(reason) if reason else None,
                    wall=self.clock.wall,
                ),
                SignalSource(self.latch),
            ],
            job,
            tmp_path,
            self.ledger,
            self.slurm,
            config or requeuing(),
            requeue_allowed=requeue_allowed,
            clock=WatchClock(self.clock.monotonic, self.clock.wall),
            wait=self.wait,
            rng=random.Random(0),
            env={**os.environ, **(env or {})},  # the job's, as the wrapper hands it on
        )

    def at(self, when: float, action: Callable[[], object]) -> None:
        self.hooks.append((when, action))
        self.hooks.sort(key=lambda h: h[0])

    def wait(self, seconds: float) -> object:
        """Like the inbox: returns at once when a message arrives, else after ``seconds``."""
        target = self.clock.now + seconds
        while self.hooks and self.hooks[0][0] <= target:
            when, action = self.hooks.pop(0)
            self.clock.now = max(self.clock.now, when)
            action()
            if not self.watcher.inbox.empty():
                return self.watcher.inbox.get_nowait()
        self.clock.now = target
        if self.clock.now > 3000:
            raise AssertionError("the watcher never finished")
        return None if self.watcher.inbox.empty() else self.watcher.inbox.get_nowait()

    def run(self) -> None:
        """The watcher's loop, here; what it says, in ``said``, as the wrapper would write it."""
        with lines.sent_to(self.said.append, "slurmpre.job", every_thread=True):
            self.watcher.run()

    def events(self) -> list[str]:
        return [r["event"] for r in dicts(Ledger(self.folder))]

    def record(self, event: str) -> dict[str, object]:
        return next(r for r in dicts(Ledger(self.folder)) if r["event"] == event)

    def commit(
        self, step: int, *, after_notice: bool | None = None, stopping: bool = False
    ) -> None:
        with writing(self.folder, step) as p:
            (p / "w").write_text(str(step))
        if after_notice is not None:  # what slurmpre.checkpoint() adds for a running job
            fields = {"stopping": True} if stopping else {}
            self.ledger.append(
                record(
                    {
                        "event": "checkpoint",
                        "job": self.watcher.job.tag,
                        "attempt": 0,
                        "step": step,
                        "path": f"p{step}",
                        "after_notice": after_notice,
                        **fields,
                    }
                )
            )

    def listening(self) -> None:
        FolderLayout(self.folder).listening("42", 0).touch()

    def take(self) -> None:
        FolderLayout(self.folder).taken("42", 0).touch()


def test_captured_draining_node_is_a_notice_with_slurms_own_time() -> None:
    (found,) = DrainSource(Nodes(CAPTURED), ["gpu-preemptible-dp-1"]).poll()
    assert (found.node, found.reason) == ("gpu-preemptible-dp-1", "preempted [by test]")
    assert found.at == time.mktime((2026, 11, 30, 17, 17, 38, 0, 0, -1))
    assert found.anchored_on == "slurm"
    assert DrainSource(Nodes(CAPTURED), ["gpu-preemptible-dp-2"]).poll() == []


def test_drain_is_seen_within_one_interval_then_requeue_after_the_commit(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.commit(10)
    h.slurm.drains["gpu-preemptible-dp-2"] = (12.3, "preempted")
    h.at(20.0, lambda: h.commit(14))  # the ranks checkpoint after the notice
    h.run()
    notice = h.record("notice")
    assert 12.3 <= notice["seen_at"] - EPOCH <= 12.3 + 5 * 1.2  # type: ignore[operator]
    assert h.slurm.requeued == ["42"]
    assert h.events() == ["notice", "committed", "requeued"]
    on_disk = read_notice(FolderLayout(tmp_path).notice("42", 0))
    assert on_disk is not None and on_disk.node == "gpu-preemptible-dp-2"
    assert h.record("committed")["step"] == 14
    assert any("requeued job 42 (after the just-in-time checkpoint)" in s for s in h.said)


def test_the_requeue_takes_its_submit_slot_where_the_jobs_environment_says(
    tmp_path: Path,
) -> None:
    """The watcher honours the environment it is given, not this process's."""
    board = tmp_path / "board"
    h = Harness(tmp_path / "ck", env={"SLURMPRE_SHARED_DIR": str(board)})
    h.slurm.drains["gpu-preemptible-dp-2"] = (12.3, "preempted")
    h.at(20.0, lambda: h.commit(14))
    h.run()
    assert h.slurm.requeued == ["42"]
    assert [p.name for p in board.glob("submit-*.lock")]  # the slot was taken there


def test_without_a_commit_it_requeues_at_the_deadline_counted_from_the_drain(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path, config=requeuing(window=60, margin=10))
    h.slurm.drains["gpu-preemptible-dp-1"] = (1.0, "preempted")
    h.run()
    assert h.slurm.requeued == ["42"]
    requeued = h.record("requeued")
    assert requeued["why"] == "deadline inside the window"
    # Slurm stamps to the second: the drain counts from 1.0, so the requeue is at 51.
    assert requeued["requeued_at"] - EPOCH == pytest.approx(51, abs=1.1)  # type: ignore[operator]
    assert h.record("notice")["deadline_from"] == "slurm"


def test_a_drain_seen_late_is_requeued_before_the_window_closes(tmp_path: Path) -> None:
    """slurmctld does not answer for 45 s: the drain at 5 s is seen late (the backoff waits up
    to a minute), and the deadline still counts from the drain, not from when it was seen."""
    h = Harness(tmp_path, config=requeuing(window=60, margin=10))
    h.slurm.down_between = (0.0, 45.0)
    h.slurm.drains["gpu-preemptible-dp-2"] = (5.0, "preempted")
    h.run()
    notice, requeued = h.record("notice"), h.record("requeued")
    seen = notice["seen_at"] - EPOCH  # type: ignore[operator]
    assert seen >= 45
    assert notice["deadline_from"] == "slurm"
    assert notice["drained_at"] - EPOCH == 5.0  # type: ignore[operator]
    assert requeued["requeued_at"] - EPOCH < 5 + 60  # type: ignore[operator]
    assert requeued["requeued_at"] - EPOCH <= max(seen, 55) + 1.1  # type: ignore[operator]


def test_without_slurms_stamp_the_deadline_counts_from_when_it_was_seen(tmp_path: Path) -> None:
    h = Harness(tmp_path, config=requeuing(window=60, margin=10))
    h.slurm.stamped = False
    h.slurm.drains["gpu-preemptible-dp-1"] = (1.0, "preempted")
    h.run()
    notice, requeued = h.record("notice"), h.record("requeued")
    assert notice["deadline_from"] == "seen"
    assert requeued["requeued_at"] - notice["seen_at"] == pytest.approx(50, abs=1.1)  # type: ignore[operator]


def test_periodic_checkpoint_after_the_notice_counts_for_a_script_that_does_not_listen(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path)
    h.commit(5)
    h.at(20.0, lambda: h.commit(10))
    h.slurm.drains["gpu-preemptible-dp-1"] = (2.0, "preempted")
    h.run()
    assert h.slurm.requeued == ["42"]
    assert h.record("committed")["step"] == 10
    # It gave the script exit_grace to show that this was its final save.
    assert h.record("requeued")["requeued_at"] - EPOCH >= 20 + 5  # type: ignore[operator]


def test_reason_pattern_filters_drains(tmp_path: Path) -> None:
    h = Harness(tmp_path, reason="^preempt")
    h.slurm.drains["gpu-preemptible-dp-1"] = (1.0, "admin: bad DIMM")
    h.at(100.0, h.watcher.stop)
    h.run()
    assert h.slurm.requeued == [] and h.events() == []


def test_two_drains_one_after_the_other_make_one_requeue(tmp_path: Path) -> None:
    h = Harness(tmp_path, config=requeuing(interval=5, window=60, margin=10))
    h.slurm.drains["gpu-preemptible-dp-2"] = (1.0, "preempted")
    h.slurm.drains["gpu-preemptible-dp-1"] = (8.0, "preempted")
    h.run()
    records = dicts(Ledger(tmp_path))
    notices = [(r["node"], r["first"]) for r in records if r["event"] == "notice"]
    assert notices == [("gpu-preemptible-dp-2", True), ("gpu-preemptible-dp-1", False)]
    assert h.slurm.requeued == ["42"]


def test_without_requeue_it_says_so_and_does_not_requeue(tmp_path: Path) -> None:
    h = Harness(tmp_path, requeue_allowed=False)
    h.commit(1)
    h.at(9.0, lambda: h.commit(2))
    h.slurm.drains["gpu-preemptible-dp-1"] = (1.0, "preempted")
    h.run()
    assert h.slurm.requeued == []
    assert h.events() == ["notice", "committed", "requeue_skipped"]
    assert any("submitted without --requeue: not requeuing" in s for s in h.said)


def test_a_300_s_controller_outage_backs_off_and_recovers_once(tmp_path: Path) -> None:
    """The time-limit source always answers; the drain source must still back off."""
    h = Harness(tmp_path)
    h.slurm.down_between = (10.0, 310.0)
    counted: dict[str, int] = {}

    def at_recovery() -> None:
        counted["outage"] = h.slurm.queries - counted["before"]

    h.at(9.99, lambda: counted.setdefault("before", h.slurm.queries))
    h.at(310.0, at_recovery)
    h.at(400.0, h.watcher.stop)
    h.run()
    assert h.slurm.requeued == [] and h.events() == []
    assert counted["outage"] <= 12, counted
    assert h.said[0].startswith("drain: Slurm does not answer (command failed (exit 1)")
    assert sum("answers again" in s for s in h.said) == 1


def test_time_limit_warning_is_a_notice_with_its_own_window(tmp_path: Path) -> None:
    h = Harness(tmp_path, config=requeuing(time_warning=120, margin=20))
    h.at(30.0, lambda: h.latch(12, None))
    h.run()
    notice, requeued = h.record("notice"), h.record("requeued")
    assert notice["kind"] == "time-limit"
    assert requeued["why"] == "deadline inside the window"
    assert requeued["requeued_at"] - EPOCH == pytest.approx(130, abs=1.1)  # type: ignore[operator]


def test_a_warning_that_came_before_the_watcher_started_is_a_notice(tmp_path: Path) -> None:
    h = Harness(tmp_path, config=requeuing(time_warning=120, margin=20))
    h.latch(12, None)  # the wrapper's latch caught it during start-up
    h.clock.now = 40.0
    h.run()
    notice = h.record("notice")
    assert notice["kind"] == "time-limit"
    assert notice["seen_at"] - EPOCH == 0.0  # type: ignore[operator]
    assert h.record("requeued")["requeued_at"] - EPOCH == pytest.approx(100, abs=1.1)  # type: ignore[operator]


def test_failed_requeue_is_retried_and_each_event_is_written_once(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.commit(1)
    h.listening()
    h.at(6.0, lambda: h.commit(2, after_notice=True))
    h.slurm.drains["gpu-preemptible-dp-1"] = (1.0, "preempted")
    h.slurm.requeue_fails = 2
    h.run()
    assert h.slurm.requeued == ["42"]
    assert sum("requeue failed, retrying" in s for s in h.said) == 2
    assert [e for e in h.events() if e != "checkpoint"] == ["notice", "committed", "requeued"]


def test_one_query_per_interval(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.at(600.0, h.watcher.stop)
    h.run()
    per_minute = h.slurm.queries / 10
    assert 10 <= per_minute <= 14  # 12 a minute at 5 s, +-20 % jitter


def test_a_listening_script_is_waited_for_not_its_periodic_save(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.listening()
    h.at(4.0, lambda: h.commit(10, after_notice=False))
    h.at(9.0, lambda: h.commit(12, after_notice=True))
    h.slurm.drains["gpu-preemptible-dp-1"] = (1.0, "preempted")
    h.run()
    assert h.slurm.requeued == ["42"]
    assert h.record("committed")["step"] == 12


def test_a_script_that_finished_after_the_notice_is_not_requeued_whatever_it_saved(
    tmp_path: Path,
) -> None:
    """It listens, but its loop ended before the notice reached it: its final save is not
    a notice checkpoint, it exits 0, and the job must end COMPLETED."""
    h = Harness(tmp_path)
    h.listening()
    h.slurm.drains["gpu-preemptible-dp-1"] = (1.0, "preempted")
    h.at(8.0, lambda: h.commit(40, after_notice=False))
    h.at(8.5, lambda: h.watcher.post_exit(0))
    h.run()
    assert h.slurm.requeued == []
    assert h.events()[-1] == "requeue_skipped"
    assert h.watcher.outcome.why == "the training finished its work after the notice"


def test_a_final_save_of_a_script_that_does_not_listen_is_not_requeued(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.commit(30)
    h.slurm.drains["gpu-preemptible-dp-1"] = (1.0, "preempted")
    h.at(10.0, lambda: h.commit(40))
    h.at(12.0, lambda: h.watcher.post_exit(0))  # within exit_grace of its commit
    h.run()
    assert h.slurm.requeued == []
    assert h.events() == ["notice", "committed", "requeue_skipped"]


def test_a_script_that_took_the_notice_and_exited_is_requeued_at_once(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.listening()
    h.slurm.drains["gpu-preemptible-dp-1"] = (1.0, "preempted")
    h.at(7.0, h.take)
    h.at(9.0, lambda: h.watcher.post_exit(0))  # it took the notice but saved nothing
    h.run()
    assert h.slurm.requeued == ["42"]
    assert h.record("requeued")["requeued_at"] - EPOCH == 9.0  # type: ignore[operator]


def test_exit_without_a_notice_ends_the_watcher_quietly(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.at(30.0, lambda: h.watcher.post_exit(0))
    h.run()
    assert h.events() == [] and h.slurm.requeued == []
    assert h.watcher.outcome.notice is None


def test_an_unwritable_ledger_does_not_stop_the_watcher(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.ledger.path.mkdir()  # appending to a folder fails with a real OSError
    h.slurm.drains["gpu-preemptible-dp-1"] = (1.0, "preempted")
    h.run()
    assert h.slurm.requeued == ["42"]
    assert any(s.startswith("could not write the ledger (watching goes on)") for s in h.said)


def test_a_frameworks_own_save_reported_with_committed_requeues_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Hugging Face Trainer's way: the script listens, the framework saves
    checkpoint-N by itself, and slurmpre.committed() tells the watcher."""
    import json

    import slurmpre

    from tests.conftest import as_a_job

    h = Harness(tmp_path)
    as_a_job(monkeypatch, tmp_path, "42")
    assert not slurmpre.preemption_requested()  # listening from the first step

    def framework_saves_on_the_notice() -> None:
        assert slurmpre.preemption_requested()
        folder = tmp_path / "checkpoint-12"
        folder.mkdir()
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": 12}))
        (folder / "model.safetensors").write_bytes(b"weights")
        assert slurmpre.committed(folder) == folder

    h.at(4.0, lambda: h.commit(10))  # a periodic save: not the one waited for
    h.at(9.0, framework_saves_on_the_notice)
    h.slurm.drains["gpu-preemptible-dp-1"] = (1.0, "preempted")
    h.run()
    assert h.slurm.requeued == ["42"]
    assert h.record("committed")["step"] == 12
    assert h.clock.now < 15  # at once, not at the deadline (window 300 s)


# -- restarting in place (the batch script's supervisor releases the drained node) ----------
SUPERVISED = dataclasses.replace(
    JobEnv(
        "42",
        0,
        0,
        ("gpu-preemptible-dp-1", "gpu-preemptible-dp-2", "gpu-preemptible-dp-3"),
        "gpu-preemptible-dp-1",
        0,
    ),
    batch_host="gpu-preemptible-dp-1",
)


def listening_script(h: Harness, *, commit_at: float = 20.0) -> None:
    """A script that listens, takes the notice and commits its checkpoint at ``commit_at``."""
    h.listening()
    h.at(commit_at - 1, h.take)
    h.at(commit_at, lambda: h.commit(14, after_notice=True))


def test_a_drained_node_other_than_the_batch_host_is_released_not_requeued(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path, job=SUPERVISED)
    listening_script(h)
    h.slurm.drains["gpu-preemptible-dp-2"] = (12.0, "preempted")
    h.run()
    assert h.slurm.requeued == []
    request = read_request(FolderLayout(tmp_path).in_place_request("42", "0"))
    assert request is not None
    assert request.keep == ("gpu-preemptible-dp-1", "gpu-preemptible-dp-3")
    assert request.release == ("gpu-preemptible-dp-2",)
    assert h.events() == ["notice", "checkpoint", "committed", "in_place_requested"]
    notice = h.record("notice")
    assert (notice["restart"], notice["requeue_floor_s"]) == ("in_place", 31)
    assert notice["expected_wait_s"] == {"requeue": 31, "in_place": 0}
    assert h.watcher.outcome.in_place == request.keep and not h.watcher.outcome.requeued


@pytest.mark.parametrize(
    ("drained", "config", "why"),
    [
        (["gpu-preemptible-dp-1"], requeuing(), "the batch host gpu-preemptible-dp-1 drained"),
        (
            ["gpu-preemptible-dp-2"],
            requeuing(min_nodes=3),
            "2 node(s) would remain, fewer than the minimum 3",
        ),
        (["gpu-preemptible-dp-2"], requeuing(in_place=False), "in-place restarts are off"),
    ],
)
def test_the_job_is_requeued_when_it_cannot_go_on_in_place(
    tmp_path: Path, drained: list[str], config: WatchConfig, why: str
) -> None:
    h = Harness(tmp_path, job=SUPERVISED, config=config)
    listening_script(h)
    for node in drained:
        h.slurm.drains[node] = (12.0, "preempted")
    h.run()
    assert h.slurm.requeued == ["42"]
    assert not FolderLayout(tmp_path).in_place_request("42", "0").exists()
    assert h.record("notice")["restart"] == "requeue"
    assert why in str(h.record("notice")["restart_why"])


def test_a_second_drain_before_the_restart_is_counted_in_the_plan(tmp_path: Path) -> None:
    """dp-3 drains after dp-2's notice but before the commit: the next step keeps dp-1 alone."""
    h = Harness(tmp_path, job=SUPERVISED)
    listening_script(h, commit_at=30.0)
    h.slurm.drains["gpu-preemptible-dp-2"] = (12.0, "preempted")
    h.slurm.drains["gpu-preemptible-dp-3"] = (20.0, "preempted")
    h.run()
    request = read_request(FolderLayout(tmp_path).in_place_request("42", "0"))
    assert request is not None and request.keep == ("gpu-preemptible-dp-1",)
    assert h.slurm.requeued == []


def test_without_a_supervisor_in_the_batch_script_it_requeues(tmp_path: Path) -> None:
    h = Harness(tmp_path, job=dataclasses.replace(SUPERVISED, batch_host=None))
    listening_script(h)
    h.slurm.drains["gpu-preemptible-dp-2"] = (12.0, "preempted")
    h.run()
    assert h.slurm.requeued == ["42"]
    assert "no supervisor" in str(h.record("notice")["restart_why"])


def test_a_notice_while_the_attempt_is_still_starting_requeues_at_once(tmp_path: Path) -> None:
    """Attempt 0's script listened; attempt 1's has not asked yet (it is loading, it has
    trained nothing since it resumed): nothing to save, so no wait for the deadline."""
    h = Harness(tmp_path, job=dataclasses.replace(JOB, restart_count=1))
    h.commit(10)
    FolderLayout(tmp_path).listening("42", 0).touch()  # the earlier attempt's mark
    h.slurm.drains["gpu-preemptible-dp-1"] = (3.0, "preempted")
    h.run()
    requeued = h.record("requeued")
    assert requeued["why"] == STILL_STARTING
    # At the first look after the drain (an interval of 5 s, +- 20 %), not at the deadline.
    assert requeued["requeued_at"] - EPOCH <= 3.0 + 5 * 1.2 + 0.5  # type: ignore[operator]


def test_an_expedited_requeue_has_no_floor_and_the_ledger_says_so(tmp_path: Path) -> None:
    """On 26.05 with enable_expedited_requeue a `--requeue=expedite` job runs again about 2 s
    after `scontrol requeue` (measured on the sandbox, stock timings): the notice expects no
    floor, the requeue is recorded as expedited, and status says so."""
    from slurmpre.login.status import job_status

    h = Harness(tmp_path, env={"SLURMPRE_EXPEDITED": "1"})
    h.slurm.drains["gpu-preemptible-dp-2"] = (12.3, "preempted")
    h.at(20.0, lambda: h.commit(14))
    h.run()
    assert h.record("notice")["requeue_floor_s"] == 0
    assert h.record("requeued")["expedited"] is True
    assert any("requeued job 42 (after the just-in-time checkpoint) (expedited: no floor)" in s
               for s in h.said)  # fmt: skip
    st = job_status("42", "x", str(tmp_path), h.ledger.records(), None, now=EPOCH + 60)
    assert st.attempts[0].ended == "notice -> requeue (expedited)"
    plain = Harness(tmp_path / "plain")
    plain.slurm.drains["gpu-preemptible-dp-2"] = (12.3, "preempted")
    plain.at(20.0, lambda: plain.commit(14))
    plain.run()
    assert plain.record("notice")["requeue_floor_s"] == 31  # cred_expire + 1
    assert "expedited" not in plain.record("requeued")


# -- hot spares (`spare_nodes`): the job holds nodes that do not train ----------------------
SPARED = dataclasses.replace(
    JobEnv("42", 0, 0, ("gpu-preemptible-dp-2", "gpu-preemptible-dp-3"), "gpu-preemptible-dp-2", 0),
    batch_host="gpu-preemptible-dp-1",
    allocation=tuple(f"gpu-preemptible-dp-{i}" for i in range(1, 5)),
)


def test_the_spares_are_the_nodes_the_job_holds_but_the_step_does_not_train_on() -> None:
    assert SPARED.spares == ("gpu-preemptible-dp-1", "gpu-preemptible-dp-4")
    # Without the supervisor no step runs on part of the job: nothing is a spare.
    assert dataclasses.replace(SPARED, batch_host=None).spares == ()


def test_a_drained_spare_is_released_while_the_training_goes_on(tmp_path: Path) -> None:
    from slurmpre.job.handover.inplace import read_spares

    h = Harness(tmp_path, job=SPARED)
    h.slurm.drains["gpu-preemptible-dp-4"] = (12.0, "preempted")
    h.at(60.0, lambda: h.watcher.post_exit(0))  # the training ends by itself, later
    h.run()
    assert "notice" not in h.events()  # no checkpoint asked, no restart: it trained on
    assert not FolderLayout(tmp_path).notice("42", "0").exists()
    assert read_spares(FolderLayout(tmp_path).spare_release("42", "0")) == ("gpu-preemptible-dp-4",)
    assert h.slurm.requeued == [] and h.watcher.outcome.action is None
    said = [s for s in h.said if s.startswith("spare gpu-preemptible-dp-4 drained")]
    assert len(said) == 1 and "1 spare(s) left" in said[0]  # said once, though seen each poll


@pytest.mark.parametrize(
    ("drains", "keep", "release"),
    [
        # A training node drains: the first spare takes its place, the other stays a spare.
        (
            {"gpu-preemptible-dp-3": 12.0},
            ("gpu-preemptible-dp-2", "gpu-preemptible-dp-1"),
            ("gpu-preemptible-dp-3",),
        ),
        # A spare drained earlier is not counted on; the in-place release names it too.
        (
            {"gpu-preemptible-dp-1": 5.0, "gpu-preemptible-dp-3": 12.0},
            ("gpu-preemptible-dp-2", "gpu-preemptible-dp-4"),
            ("gpu-preemptible-dp-1", "gpu-preemptible-dp-3"),
        ),
    ],
)
def test_a_spare_takes_a_drained_training_nodes_place_and_the_world_size_holds(
    tmp_path: Path, drains: dict[str, float], keep: tuple[str, ...], release: tuple[str, ...]
) -> None:
    job = dataclasses.replace(SPARED, batch_host="gpu-preemptible-dp-9")  # the host trains on
    h = Harness(tmp_path, job=job, config=requeuing(min_nodes=2))
    listening_script(h)
    for node, at in drains.items():
        h.slurm.drains[node] = (at, "preempted")
    h.run()
    assert h.slurm.requeued == []
    request = read_request(FolderLayout(tmp_path).in_place_request("42", "0"))
    assert request is not None
    assert (request.keep, request.release) == (keep, release)
    assert len(request.keep) == len(job.nodes)  # the same world size
    assert request.spares_in == (keep[-1],)
    assert h.record("in_place_requested")["spares_in"] == [keep[-1]]


def test_with_every_spare_gone_a_drain_goes_on_as_without_spares(tmp_path: Path) -> None:
    job = dataclasses.replace(SPARED, batch_host="gpu-preemptible-dp-9")
    h = Harness(tmp_path, job=job, config=requeuing(min_nodes=2))
    listening_script(h)
    for node, at in (("gpu-preemptible-dp-1", 3.0), ("gpu-preemptible-dp-4", 4.0)):
        h.slurm.drains[node] = (at, "preempted")
    h.slurm.drains["gpu-preemptible-dp-3"] = (12.0, "preempted")
    h.run()
    # One node would remain, fewer than MIN = 2: Slurm's requeue, as before spares.
    assert h.slurm.requeued == ["42"]
    assert not FolderLayout(tmp_path).in_place_request("42", "0").exists()


def test_the_batch_host_held_as_a_spare_drains_and_the_job_goes_on_elsewhere(
    tmp_path: Path,
) -> None:
    """Its drain ends the whole allocation, spare or not: a notice, not a release."""

    h = Harness(tmp_path, job=SPARED)
    listening_script(h)
    h.slurm.drains["gpu-preemptible-dp-1"] = (12.0, "preempted")
    h.run()
    assert h.slurm.requeued == ["42"]
    assert not FolderLayout(tmp_path).spare_release("42", "0").exists()
    assert h.record("notice")["restart_why"] == "the batch host gpu-preemptible-dp-1 drained"


# -- make before break in place (`overlap`): the next step starts on the spare early -------
@pytest.mark.parametrize("said", [True, False], ids=["saved-to-stop", "older-api"])
def test_with_a_spare_the_next_step_starts_early_and_this_one_trains_until_it_waits(
    tmp_path: Path, said: bool
) -> None:
    """A script that meets at resume_path() and goes on after its notice checkpoint: the
    supervisor is asked at the notice to start the next step beside this one; the training
    goes on until that step waits for it (its Waiting record), then stops at a last
    checkpoint; once that checkpoint says it is the one the script stops at, the restart
    is asked that ends this step (its teardown is not waited for); a checkpoint that does
    not say so (a script on an older slurmpre) is waited for until the training exits."""
    from slurmpre.folder.records import Waiting

    job = dataclasses.replace(SPARED, batch_host="gpu-preemptible-dp-9")
    layout = FolderLayout(tmp_path)
    h = Harness(tmp_path, job=job, config=requeuing(min_nodes=2))
    layout.meets_at_resume("42").touch()  # the script asked resume_path() at its start
    h.listening()
    layout.goes_on("42", "0").touch()  # ... and checkpoint_requested(): it goes on
    h.slurm.drains["gpu-preemptible-dp-3"] = (12.0, "preempted")
    early: list[Any] = []
    h.at(
        16.0, lambda: early.append(read_request(FolderLayout(tmp_path).in_place_request("42", "0")))
    )
    h.at(17.0, lambda: h.commit(14, after_notice=True))  # the notice checkpoint; trains on
    waiting = Waiting(job="42", attempt=0, in_place=1, predecessor="42", waiting_at=EPOCH + 30)
    h.at(30.0, lambda: h.ledger.append(waiting))  # the next step waits in resume_path()
    h.at(33.0, h.take)  # told to stop: preemption_requested() answers True
    h.at(34.0, lambda: h.commit(20, after_notice=True, stopping=said))  # its last checkpoint
    h.at(40.0, lambda: h.watcher.post_exit(0))
    h.run()
    (asked,) = early
    assert asked is not None and asked.early  # at the notice, before any checkpoint
    assert asked.keep == ("gpu-preemptible-dp-2", "gpu-preemptible-dp-1")
    assert h.slurm.requeued == []
    stopping = h.record("stopping")
    assert "started beside this one, is ready" in str(stopping["why"])
    assert float(stopping["asked_at"]) >= EPOCH + 30  # not before the next step waited
    final = read_request(FolderLayout(tmp_path).in_place_request("42", "0"))
    assert final is not None and not final.early and final.keep == asked.keep
    asked_twice = [r for r in dicts(Ledger(tmp_path)) if r["event"] == "in_place_requested"]
    assert [r.get("early") for r in asked_twice] == [True, None]
    asked_at = float(asked_twice[1]["requested_at"])
    if said:  # at the stop checkpoint's commit, not at the exit
        assert EPOCH + 34 <= asked_at < EPOCH + 40
    else:
        assert asked_at >= EPOCH + 40  # once the training exited


def test_without_resume_path_or_a_spare_the_restart_waits_for_this_step_as_before(
    tmp_path: Path,
) -> None:
    """A script that never asked resume_path() would load a checkpoint by itself while this
    step trains: no early start, the notice says stop at once."""
    job = dataclasses.replace(SPARED, batch_host="gpu-preemptible-dp-9")
    h = Harness(tmp_path, job=job, config=requeuing(min_nodes=2))
    listening_script(h)
    h.slurm.drains["gpu-preemptible-dp-3"] = (12.0, "preempted")
    h.run()
    asked = [r for r in dicts(Ledger(tmp_path)) if r["event"] == "in_place_requested"]
    assert len(asked) == 1 and asked[0].get("early") is None


def test_in_place_with_the_tier_the_kept_nodes_pull_the_save_before_the_restart(
    tmp_path: Path,
) -> None:
    """The notice save is on the nodes (`saved`): the kept nodes are asked to pull it, and
    the in-place restart, which lets the drained node go, waits for their pull even after
    the training has exited."""
    from slurmpre.folder.records import Pulled, Saved, Serving, Start

    h = Harness(tmp_path, job=SUPERVISED)
    h.listening()
    h.slurm.drains["gpu-preemptible-dp-2"] = (12.0, "preempted")
    nodes = SUPERVISED.nodes
    h.ledger.append(Start(job="42", attempt=0, nodes=nodes, num_nodes=3))
    for i, node in enumerate(nodes):
        h.ledger.append(Serving(job="42", attempt=0, node=node, host="h", port=10 + i))
    h.at(19.0, h.take)
    h.at(20.0, lambda: h.ledger.append(Saved(job="42", attempt=0, step=14, path="/dev/shm/x",
                                             seconds=0.5, after_notice=True)))  # fmt: skip
    h.at(21.0, lambda: h.watcher.post_exit(0))
    for node in (0, 2):  # the kept nodes' pulls end at 26 s
        h.at(26.0, lambda n=node: h.ledger.append(Pulled(  # type: ignore[misc]
            job="42", attempt=0, node=n, step=14, ok=True, seconds=4.0, bytes=9)))  # fmt: skip
    h.run()
    assert h.slurm.requeued == []
    asked = h.record("pull_asked")
    assert asked["pullers"] == [0, 2] and asked["sources"] == ["h:10", "h:11", "h:12"]
    events = [e for e in h.events() if e not in ("start", "serving", "saved", "pulled")]
    assert events == ["notice", "pull_asked", "pull_done", "committed", "in_place_requested"]
    assert h.record("pull_done")["ok"]
    assert float(h.record("in_place_requested")["requested_at"]) >= EPOCH + 26


def _beside(tmp_path: Path, pulls: str, *, taken: bool = True, commit_at: float = 40.0) -> Harness:
    """A hot spare's next step runs beside this one (on dp-2 and the spare dp-1), its nodes
    serving; this step's last save (14) is on its nodes, its training exits at 21 s; the
    next step's pulls end at 26 s as ``pulls`` says ("ok", "cut", or "never"); the flush
    commits the save at ``commit_at``."""
    from slurmpre.folder.records import Pulled, Saved, Serving, Start

    job = dataclasses.replace(SPARED, batch_host="gpu-preemptible-dp-9")
    h = Harness(tmp_path, job=job, config=requeuing(min_nodes=2))
    FolderLayout(tmp_path).meets_at_resume("42").touch()  # the script meets at resume_path()
    h.listening()
    h.slurm.drains["gpu-preemptible-dp-3"] = (12.0, "preempted")
    h.ledger.append(Start(job="42", attempt=0, nodes=job.nodes, num_nodes=2))
    for i, node in enumerate(job.nodes):
        h.ledger.append(Serving(job="42", attempt=0, node=node, host="h", port=10 + i))
    for i, node in enumerate(("gpu-preemptible-dp-2", "gpu-preemptible-dp-1")):  # the next step
        h.ledger.append(Serving(job="42", attempt=0, in_place=1, node=node, host="n", port=i))
    if taken:
        h.at(19.0, h.take)
    h.at(20.0, lambda: h.ledger.append(Saved(job="42", attempt=0, step=14, path="/dev/shm/x",
                                             seconds=0.5, after_notice=True)))  # fmt: skip
    h.at(21.0, lambda: h.watcher.post_exit(0))
    for node in (0, 1) if pulls != "never" else ():
        h.at(26.0, lambda n=node: h.ledger.append(Pulled(  # type: ignore[misc]
            job="42", attempt=0, in_place=1, node=n, step=14, ok=pulls == "ok", seconds=4.0,
            bytes=9, why=None if pulls == "ok" else "cut")))  # fmt: skip
    h.at(commit_at, lambda: h.commit(14, after_notice=True))  # the flush's commit
    h.run()
    return h


def _restart_asked_at(h: Harness) -> float:
    requests = [r for r in dicts(Ledger(h.folder)) if r["event"] == "in_place_requested"]
    assert [r.get("early") for r in requests] == [True, None]
    return float(requests[1]["requested_at"]) - EPOCH


@pytest.mark.parametrize("pulls", ["ok", "cut", "never"])
def test_beside_a_spare_with_the_tier_the_step_ends_once_the_next_one_holds_its_save(
    tmp_path: Path, pulls: str
) -> None:
    """Once the training has exited, every node of the next step is asked to pull its last
    save, and the restart that ends this step (and lets the drained node go) waits for that
    pull, not for the flush; when the pull fails, for the flush's commit; when it never
    answers, for the commit and a grace after it (it is then given up, recorded)."""
    h = _beside(tmp_path, pulls)
    assert h.slurm.requeued == []
    asked = h.record("pull_asked")
    assert (asked.get("in_place"), asked["pullers"], asked["sources"]) == (
        1,
        [0, 1],
        ["h:10", "h:11"],
    )
    done = h.record("pull_done")
    assert done["ok"] is (pulls == "ok") and done.get("in_place") is None  # this step's
    at = _restart_asked_at(h)
    if pulls == "ok":
        assert 26 <= at < 40  # not the flush
    elif pulls == "cut":
        assert 40 <= at < 41  # the flush first
    else:
        assert 40 + in_place.COMMITTED_GRACE <= at < 41 + in_place.COMMITTED_GRACE
        assert "after its flush committed it" in str(done["why"])


def test_beside_a_spare_a_pull_not_answered_by_the_deadline_is_given_up_there(
    tmp_path: Path,
) -> None:
    h = _beside(tmp_path, "never", commit_at=2000.0)
    done = h.record("pull_done")
    assert not done["ok"] and "in time" in str(done["why"])
    notice = h.record("notice")
    assert _restart_asked_at(h) == pytest.approx(float(notice["deadline_at"]) - EPOCH, abs=1.5)


def test_beside_a_spare_a_training_that_finished_its_work_pulls_nothing(tmp_path: Path) -> None:
    """It exited 0 without taking the notice: the run is over, its last save must reach the
    folder; nothing is pulled, and its nodes do not count it held elsewhere."""
    from slurmpre.tier.in_place import kept

    h = _beside(tmp_path, "ok", taken=False)
    assert "requeue_skipped" in h.events() and "pull_asked" not in h.events()
    assert not kept(Ledger(tmp_path).records(), "42", AttemptId(0), 14)
