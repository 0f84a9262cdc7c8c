"""The notice gate: ranks that see the notice file at different moments still agree on one call."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from slurmpre.folder.layout import FolderLayout
from slurmpre.job.watch.notice import (
    CHECKPOINT,
    HURRY,
    NO_NOTICE,
    STOP,
    Notice,
    NoticeGate,
    read_notice,
    write_notice,
)

from tests.job.conftest import Clock


class TwoRankAllReduce:
    """MAX over two threads, the semantics of dist.all_reduce(op=MAX); counts the calls."""

    def __init__(self) -> None:
        self.barrier = threading.Barrier(2)
        self.values: list[tuple[int, int]] = [(0, 0), (0, 0)]
        self.calls = [0, 0]

    def agree_for(self, rank: int):  # type: ignore[no-untyped-def]
        def agree(flag: int, every: int) -> tuple[int, int]:
            self.calls[rank] += 1
            self.values[rank] = (flag, every)
            self.barrier.wait()
            out = (max(v[0] for v in self.values), min(v[1] for v in self.values))
            self.barrier.wait()
            return out

        return agree


def test_notice_file_round_trip(tmp_path: Path) -> None:
    path = FolderLayout(tmp_path).notice("7_1", 2)
    path.parent.mkdir()
    assert path.name == "notice-7_1-2.json" and read_notice(path) is None
    write_notice(path, Notice("drain", "n1", "preempted", 12.5))
    assert read_notice(path) == Notice("drain", "n1", "preempted", 12.5)


def test_without_distributed_it_is_the_local_check(tmp_path: Path) -> None:
    clock = Clock()
    marker = tmp_path / "notice"
    gate = NoticeGate(lambda: str(marker), clock=clock)
    assert gate(None) is False
    marker.write_text("{}")
    clock.now += 0.5
    assert gate(None) is False  # checked at most once a second
    clock.now += 0.6
    assert gate(None) is True
    marker.unlink()
    assert gate(None) is True  # once requested, stays requested


def two_ranks(
    level_at: Callable[[int, int], int], calls: int
) -> tuple[list[list[int]], TwoRankAllReduce]:
    """Two ranks (threads) asking their gates once per 100 ms step for ``calls`` steps; rank
    r's node reads level_at(r, call) in the notice file. The level each agreed, per call."""
    reduce = TwoRankAllReduce()
    results: list[list[int]] = [[], []]

    def rank(r: int) -> None:
        clock = Clock()
        n = {"call": 0}
        gate = NoticeGate(
            lambda: "notice", clock=clock, level=lambda _: level_at(r, n["call"]), check_every=0.0
        )
        agree = reduce.agree_for(r)
        for _ in range(calls):
            n["call"] += 1
            clock.now += 0.1  # 100 ms steps
            results[r].append(gate.agree(agree))

    errors: list[BaseException] = []

    def guarded(r: int) -> None:
        try:
            rank(r)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's own thread
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads), "a rank hung"
    if errors:
        raise errors[0]
    return results, reduce


def test_ranks_agree_on_the_same_call_and_sync_about_once_a_second() -> None:
    # Rank 0's node sees the notice file at call 50, rank 1's at call 57.
    sees_at = [50, 57]
    results, reduce = two_ranks(lambda r, call: STOP if call >= sees_at[r] else NO_NOTICE, 200)
    first = [[level >= CHECKPOINT for level in res].index(True) for res in results]
    assert first[0] == first[1]  # the same call on both ranks
    assert 49 <= first[0] <= 49 + 11  # within about a second of 100 ms steps
    assert all(results[0][first[0] :]) and all(results[1][first[1] :])
    # Amortised: far fewer collectives than calls before the notice.
    assert reduce.calls[0] == reduce.calls[1] < first[0] // 5


def test_once_the_ranks_agree_on_a_notice_they_agree_on_the_stop_within_a_hurry() -> None:
    """A hand-over: the notice (save and go on) at call 50, the stop (the successor is up)
    at call 150 on one node, 153 on the other. Before the notice the ranks sync about once
    a second; after it every HURRY seconds, so the stop is agreed within about HURRY, not a
    second (each second of it the successor waits for the predecessor)."""

    def level_at(r: int, call: int) -> int:
        return STOP if call >= 150 + 3 * r else CHECKPOINT if call >= 50 else NO_NOTICE

    results, _ = two_ranks(level_at, 200)
    stop = [res.index(STOP) for res in results]
    assert stop[0] == stop[1]  # the same call on both ranks
    assert 149 <= stop[0] <= 149 + round(HURRY / 0.1) + 1  # rank 0 sees it at call 150
    assert results[0].index(CHECKPOINT) > 49


def test_a_script_that_passes_env_keeps_one_gate_and_is_asked_to_save_once(
    tmp_path: Path,
) -> None:
    """Given env= at every call, each call made a gate of its own: checkpoint_requested()
    answered True at every step of a notice, not once."""
    import slurmpre

    notice = FolderLayout(tmp_path).notice("9", 0)
    notice.parent.mkdir()
    env = {"SLURMPRE_CHECKPOINT_DIR": str(tmp_path), "SLURMPRE_JOB_TAG": "9"}
    assert not slurmpre.checkpoint_requested(env=env)
    slurmpre.api.watch_notices(str(notice), check_every=0.0)
    write_notice(notice, Notice("drain", "n1", "preempted", 1.0, stop=False))
    answers = [slurmpre.checkpoint_requested(env=env) for _ in range(5)]
    assert answers == [True, False, False, False, False]
