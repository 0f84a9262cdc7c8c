"""The watcher's decisions, with a fast-forwarded clock and a scripted Slurm client.

These are unit tests of the state machine; the same paths run against the
real sandbox in tests/e2e/test_notice.py.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from pathlib import Path

import pytest
from slurmpre.errors import SlurmError
from slurmpre.job.checkpoints import writing
from slurmpre.job.env import JobEnv
from slurmpre.job.ledger import Ledger
from slurmpre.job.notice import notice_path, read_notice
from slurmpre.job.watch import DrainSource, SignalSource, WatchConfig, Watcher
from slurmpre.slurm.parse import NodeInfo, parse_nodes

from tests.conftest import DATA

JOB = JobEnv(
    "42", 0, 0, ("gpu-preemptible-dp-1", "gpu-preemptible-dp-2"), "gpu-preemptible-dp-1", 0
)
CAPTURED = parse_nodes((DATA / "slurm-22.05" / "nodes-one-draining.txt").read_text())


def node(name: str, drain: bool = False, reason: str | None = None) -> NodeInfo:
    flags = frozenset({"DRAIN"}) if drain else frozenset()
    return NodeInfo(name, "MIXED", flags, reason, ("preemptible",))


class ScriptedSlurm:
    """Answers `nodes` from a script of states; records requeues."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.drains: dict[str, tuple[float, str]] = {}
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
            out.append(
                node(name, drain=at is not None and now >= at[0], reason=at[1] if at else None)
            )
        return out

    def requeue(self, job_id: str) -> None:
        if self.requeue_fails:
            self.requeue_fails -= 1
            raise SlurmError("command failed (exit 1): scontrol requeue 42")
        self.requeued.append(job_id)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return 1_000_000.0 + self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def make(
    tmp_path: Path,
    *,
    requeue_allowed: bool = True,
    reason: str | None = None,
    config: WatchConfig | None = None,
    hooks: dict[float, object] | None = None,
) -> tuple[Watcher, ScriptedSlurm, Clock, list[str], SignalSource]:
    clock = Clock()
    slurm = ScriptedSlurm(clock)
    said: list[str] = []
    signal = SignalSource(wall=clock.wall)
    ledger = Ledger(tmp_path)
    ledger.ensure()
    pending = dict(sorted((hooks or {}).items()))

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        for at in list(pending):
            if clock.now >= at:
                pending.pop(at)()  # type: ignore[operator]
        if clock.now > 2000:
            watcher.stop()

    watcher = Watcher(
        [
            DrainSource(slurm, JOB.nodes, re.compile(reason) if reason else None, wall=clock.wall),
            signal,
        ],  # type: ignore[arg-type]
        JOB,
        tmp_path,
        ledger,
        slurm,  # type: ignore[arg-type]
        config or WatchConfig(),
        requeue_allowed=requeue_allowed,
        say=said.append,
        clock=clock.monotonic,
        wall=clock.wall,
        sleep=sleep,
        rng=random.Random(0),
    )
    return watcher, slurm, clock, said, signal


def events(tmp_path: Path) -> list[str]:
    return [r["event"] for r in Ledger(tmp_path).records()]


def commit_at(tmp_path: Path, step: int) -> None:
    with writing(tmp_path, step) as p:
        (p / "w").write_text(str(step))


def test_captured_draining_node_is_a_notice() -> None:
    class Captured:
        def nodes(self, names: Sequence[str] = ()) -> list[NodeInfo]:
            return CAPTURED

    found = DrainSource(Captured(), ["gpu-preemptible-dp-1"]).poll()  # type: ignore[arg-type]
    assert found is not None and (found.node, found.reason) == (
        "gpu-preemptible-dp-1",
        "preempted [by test]",
    )
    assert DrainSource(Captured(), ["gpu-preemptible-dp-2"]).poll() is None  # type: ignore[arg-type]


def test_drain_is_seen_within_one_interval_then_requeue_after_the_commit(tmp_path: Path) -> None:
    commit_at(tmp_path, 10)
    watcher, slurm, clock, said, _ = make(tmp_path)
    slurm.drains["gpu-preemptible-dp-2"] = (12.3, "preempted")
    seen: list[float] = []
    original = watcher._on_notice

    def on_notice(n):  # type: ignore[no-untyped-def]
        seen.append(clock.now)
        original(n)
        clock.now += 3  # the ranks take 3 s to checkpoint
        commit_at(tmp_path, 14)

    watcher._on_notice = on_notice  # type: ignore[method-assign]
    watcher.run()
    assert 12.3 <= seen[0] <= 12.3 + 5 * 1.2
    assert slurm.requeued == ["42"]
    assert events(tmp_path) == ["notice", "committed", "requeued"]
    notice = read_notice(notice_path(tmp_path, "42", 0))
    assert notice is not None and notice.node == "gpu-preemptible-dp-2"
    committed = Ledger(tmp_path).records()[1]
    assert committed["step"] == 14
    assert any("requeued job 42 (after the just-in-time checkpoint)" in s for s in said)


def test_without_a_commit_it_requeues_at_the_deadline(tmp_path: Path) -> None:
    watcher, slurm, _, _, _ = make(tmp_path, config=WatchConfig(window=60, margin=10))
    slurm.drains["gpu-preemptible-dp-1"] = (1.0, "preempted")
    watcher.run()
    assert slurm.requeued == ["42"]
    requeued = Ledger(tmp_path).records()[-1]
    assert requeued["why"] == "deadline inside the window"
    notice = Ledger(tmp_path).records()[0]
    assert requeued["requeued_at"] - notice["seen_at"] == pytest.approx(50, abs=1.5)


def test_periodic_checkpoint_after_the_notice_also_counts(tmp_path: Path) -> None:
    """A script that ignores the API: the next periodic checkpoint triggers the requeue."""
    commit_at(tmp_path, 5)
    watcher, slurm, _, _, _ = make(tmp_path, hooks={20.0: lambda: commit_at(tmp_path, 10)})
    slurm.drains["gpu-preemptible-dp-1"] = (2.0, "preempted")
    watcher.run()
    assert slurm.requeued == ["42"]
    assert Ledger(tmp_path).records()[1]["step"] == 10


def test_reason_pattern_filters_drains(tmp_path: Path) -> None:
    watcher, slurm, _, _, _ = make(tmp_path, reason="^preempt")
    slurm.drains["gpu-preemptible-dp-1"] = (1.0, "admin: bad DIMM")
    watcher.run()
    assert slurm.requeued == [] and events(tmp_path) == []


def test_two_drains_one_after_the_other_make_one_requeue(tmp_path: Path) -> None:
    watcher, slurm, _, _, _ = make(tmp_path, config=WatchConfig(interval=5, window=60, margin=10))
    slurm.drains["gpu-preemptible-dp-2"] = (1.0, "preempted")
    slurm.drains["gpu-preemptible-dp-1"] = (8.0, "preempted")
    watcher.run()
    records = Ledger(tmp_path).records()
    notices = [(r["node"], r["first"]) for r in records if r["event"] == "notice"]
    assert notices == [("gpu-preemptible-dp-2", True), ("gpu-preemptible-dp-1", False)]
    assert slurm.requeued == ["42"]


def test_without_requeue_it_says_so_and_does_not_requeue(tmp_path: Path) -> None:
    commit_at(tmp_path, 1)
    watcher, slurm, _, said, _ = make(
        tmp_path, requeue_allowed=False, hooks={9.0: lambda: commit_at(tmp_path, 2)}
    )
    slurm.drains["gpu-preemptible-dp-1"] = (1.0, "preempted")
    watcher.run()
    assert slurm.requeued == []
    assert events(tmp_path) == ["notice", "committed", "requeue_skipped"]
    assert any("submitted without --requeue: not requeuing" in s for s in said)
    assert watcher.finished.is_set()


def test_controller_outage_backs_off_without_a_false_notice(tmp_path: Path) -> None:
    queries: list[int] = []

    def stop() -> None:
        queries.append(slurm.queries)
        watcher.stop()

    watcher, slurm, _, said, _ = make(tmp_path, hooks={300.0: stop})
    slurm.down_between = (10.0, 70.0)
    watcher.run()
    assert slurm.requeued == [] and events(tmp_path) == []
    assert watcher.notice is None
    assert said[0].startswith("Slurm does not answer (command failed (exit 1)")
    assert any(s.startswith("Slurm answers again after") for s in said)
    # Backed off while down: fewer queries than one per interval over the run.
    assert queries[0] < 300 / 5


def test_time_limit_warning_is_a_notice_with_its_own_window(tmp_path: Path) -> None:
    config = WatchConfig(time_warning=120, margin=20)
    watcher, _, _, _, signal = make(tmp_path, config=config, hooks={30.0: lambda: signal.trigger()})
    watcher.run()
    records = Ledger(tmp_path).records()
    assert records[0]["kind"] == "time-limit"
    assert records[-1]["why"] == "deadline inside the window"
    assert records[-1]["requeued_at"] - records[0]["seen_at"] == pytest.approx(100, abs=1.5)


def test_failed_requeue_is_retried(tmp_path: Path) -> None:
    commit_at(tmp_path, 1)
    watcher, slurm, _, said, _ = make(tmp_path, hooks={6.0: lambda: commit_at(tmp_path, 2)})
    slurm.drains["gpu-preemptible-dp-1"] = (1.0, "preempted")
    slurm.requeue_fails = 2
    watcher.run()
    assert slurm.requeued == ["42"]
    assert sum("requeue failed, retrying" in s for s in said) == 2


def test_one_query_per_interval(tmp_path: Path) -> None:
    stop_at = 600.0
    watcher, slurm, _, _, _ = make(tmp_path, hooks={stop_at: lambda: watcher.stop()})
    watcher.run()
    per_minute = slurm.queries / (stop_at / 60)
    assert 10 <= per_minute <= 14  # 12 a minute at 5 s, +-20 % jitter


def test_a_listening_script_is_waited_for_not_its_periodic_save(tmp_path: Path) -> None:
    """The script asks preemption_requested(): a periodic save after the notice is not enough."""
    from slurmpre.job.notice import listening_path

    ledger = Ledger(tmp_path)

    def periodic() -> None:
        commit_at(tmp_path, 10)
        ledger.append(
            {"event": "checkpoint", "attempt": 0, "step": 10, "path": "p10", "after_notice": False}
        )

    def on_notice_save() -> None:
        commit_at(tmp_path, 12)
        ledger.append(
            {"event": "checkpoint", "attempt": 0, "step": 12, "path": "p12", "after_notice": True}
        )

    watcher, slurm, _, _, _ = make(tmp_path, hooks={4.0: periodic, 9.0: on_notice_save})
    listening_path(tmp_path, "42", 0).touch()
    slurm.drains["gpu-preemptible-dp-1"] = (1.0, "preempted")
    watcher.run()
    assert slurm.requeued == ["42"]
    committed = next(r for r in Ledger(tmp_path).records() if r["event"] == "committed")
    assert committed["step"] == 12
