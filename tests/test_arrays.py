"""Arrays in every login command: ``123`` is all the array's tasks, ``123_5`` one; only
the user's jobs asked of Slurm; lines of one node; progress shown for waits."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from slurmpre.errors import UsageError
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.locks import FolderLock
from slurmpre.login import arrays, jobs, progress
from slurmpre.login.logs import NodeLines
from slurmpre.slurm.parse import parse_squeue

from tests.fakes import Jobs
from tests.records import record

DATA = Path(__file__).parent / "data" / "slurm-22.05"


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        ("0-2", ["0", "1", "2"]),
        ("7", ["7"]),
        ("1,3,5-9:2%4", ["1", "3", "5", "7", "9"]),
        ("3,1-3", ["3", "1", "2"]),
    ],
)
def test_task_ids_of_a_range(text: str, ids: list[str]) -> None:
    assert arrays.task_ids(text) == ids


def test_split_names_a_task_only_for_id_underscore_id() -> None:
    assert arrays.split("123_5") == ("123", "5")
    assert arrays.split("123") == ("123", None)
    assert arrays.split("my_job") == ("my_job", None)


def test_squeue_of_one_user_reads_as_jobs_with_their_array_tags() -> None:
    found = parse_squeue((DATA / "squeue-user.txt").read_text())
    # captured on the sandbox: an array 4 (tasks 0, 1 running, 2-3 pending) and job 5
    assert [j.tag for j in found] == ["4", "4_0", "4_1", "5"]
    assert [j.state for j in found] == ["PENDING", "RUNNING", "RUNNING", "RUNNING"]
    assert found[3].name == "odd|name x" and found[3].user == "root"
    tags = jobs.by_tag(found)
    assert tags["4_2"].state == tags["4_3"].state == "PENDING"  # still in the array's record
    assert tags["4_1"].job_id == "7"


def _index(tmp_path: Path, *entries: jobs.Submitted) -> Path:
    index = tmp_path / "jobs.jsonl"
    for e in entries:
        jobs.remember(e, index)
    return index


def test_an_array_job_stands_for_its_tasks_and_a_task_is_found_by_its_name(
    tmp_path: Path,
) -> None:
    ck = str(tmp_path / "sweep")
    index = _index(
        tmp_path,
        jobs.Submitted("40", "plain", "/c/plain", "/c/plain/logs", 1.0),
        jobs.Submitted("41", "sweep", ck, f"{ck}/logs", 2.0, array="0-2"),
    )
    assert "array" not in json.loads(index.read_text().splitlines()[0])  # as ever
    whole = jobs.locate("41", path=index)
    assert whole.array == "0-2"
    assert [t.job for t in whole.tasks()] == ["41_0", "41_1", "41_2"]
    task = jobs.locate("41_1", path=index)
    assert (task.job, task.name, task.array) == ("41_1", "sweep", None)
    assert task.checkpoint_dir == f"{ck}/task-1" and task.log_dir == f"{ck}/logs"
    with pytest.raises(UsageError, match="has no task 5"):
        jobs.locate("41_5", path=index)
    with pytest.raises(UsageError, match="job 40 is not an array job"):
        jobs.locate("40_1", path=index)


def test_a_task_of_an_array_recorded_without_its_range_is_found_by_its_folder(
    tmp_path: Path,
) -> None:
    ck = tmp_path / "old"
    (ck / "task-3").mkdir(parents=True)
    index = _index(tmp_path, jobs.Submitted("42", "old", str(ck), f"{ck}/logs", 1.0))
    found = jobs.locate("42_3", path=index)
    assert (found.job, found.checkpoint_dir) == ("42_3", str(ck / "task-3"))
    with pytest.raises(UsageError, match="job 42 is not an array job"):
        jobs.locate("42_4", path=index)


def test_a_task_is_found_through_its_arrays_ledger(tmp_path: Path) -> None:
    top = Ledger(tmp_path)
    top.ensure()
    top.append(record({"event": "submitted", "job": "41", "name": "sweep", "array": "0-1"}))
    task_dir = tmp_path / "task-1"
    below = Ledger(task_dir)
    below.ensure()
    below.append(record({"event": "start", "job": "41_1", "attempt": 0}))
    by_array = jobs.locate("41_1", str(tmp_path))
    by_task = jobs.locate("41_1", str(task_dir))
    for found in (by_array, by_task):
        assert (found.job, found.name) == ("41_1", "sweep")
        assert found.checkpoint_dir == str(task_dir)
        assert found.log_dir == str(tmp_path / "logs")
    assert jobs.locate("41", str(tmp_path)).array == "0-1"


def test_rows_ask_slurm_for_the_users_jobs_only_and_go_on_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ck = str(tmp_path / "sweep")
    index = _index(tmp_path, jobs.Submitted("4", "sweep", ck, f"{ck}/logs", 2.0, array="0-3"))
    monkeypatch.setattr(jobs, "index_path", lambda env=None: index)
    monkeypatch.setattr(jobs.getpass, "getuser", lambda: "root")
    live = parse_squeue((DATA / "squeue-user.txt").read_text())
    slurm = Jobs({j.job_id: j for j in live})
    rows = jobs.rows(slurm)
    assert slurm.asked == ["jobs user=root"]
    assert [(r["job"], r["state"]) for r in rows] == [
        ("4_0", "RUNNING"), ("4_1", "RUNNING"), ("4_2", "PENDING"), ("4_3", "PENDING"),
    ]  # fmt: skip
    said: list[str] = []
    down = jobs.rows(Jobs({}, down=True), warn=said.append)
    assert {r["state"] for r in down} == {"UNKNOWN TO SLURM"}
    assert len(said) == 1 and "Slurm did not answer" in said[0]


def test_node_lines_keep_one_nodes_lines_and_the_scripts_own() -> None:
    out: list[str] = []
    keep = NodeLines(1, out.append)
    for chunk in (
        "slurmpre: job 7 attempt 0 on 2 node(s)\n0: rank 0 st",
        "ep 1\n1: rank 1 ",
        "step 1\n",
    ):
        keep(chunk)
    keep("1: no newline yet")
    keep.flush()
    assert (
        "".join(out)
        == "slurmpre: job 7 attempt 0 on 2 node(s)\n1: rank 1 step 1\n1: no newline yet"
    )
    with pytest.raises(UsageError, match="--node -1"):
        NodeLines(-1, out.append)


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _until(condition: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.01)


def test_a_long_wait_is_said_in_plain_lines_and_a_short_one_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(progress, "PLAIN_AFTER", 0.05)
    out = io.StringIO()
    with progress.waiting("checking the thing", out):
        _until(lambda: "checking the thing ..." in out.getvalue())
    assert out.getvalue().splitlines()[-1].startswith("slurmpre: checking the thing: over after")
    monkeypatch.setattr(progress, "PLAIN_AFTER", 60.0)
    quiet = io.StringIO()
    with progress.waiting("quick", quiet):
        pass
    assert quiet.getvalue() == ""
    assert progress.STREAM is None  # the API is silent unless the caller asks


def test_a_terminal_sees_one_line_redrawn_then_cleared(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "REDRAW", 0.01)
    out = _Tty()
    with progress.waiting("waiting for the checkpoint", out):
        _until(lambda: out.getvalue().count("\r") >= 3)
    text = out.getvalue()
    assert "\n" not in text and "slurmpre: waiting for the checkpoint (" in text
    assert text.endswith("\r\033[K")


def test_a_held_lock_is_awaited_with_progress_a_free_one_silently(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(progress, "PLAIN_AFTER", 0.05)
    out = io.StringIO()
    monkeypatch.setattr(progress, "STREAM", out)
    free = progress.acquire(FolderLock(tmp_path / "a.lock", timeout=5), "the free one")
    free.release()
    assert out.getvalue() == ""
    holder = FolderLock(tmp_path / "b.lock", timeout=0).acquire()
    errors: list[BaseException] = []

    def let_go() -> None:
        try:
            _until(lambda: "the held one" in out.getvalue())
        except BaseException as exc:  # noqa: BLE001 - reaches pytest below
            errors.append(exc)
        holder.release()

    thread = threading.Thread(target=let_go)
    thread.start()
    taken = progress.acquire(FolderLock(tmp_path / "b.lock", timeout=60), "the held one")
    thread.join()
    taken.release()
    assert not errors, errors
    assert "slurmpre: the held one (up to 60 s) ..." in out.getvalue()


def test_the_shell_completes_job_ids_task_ids_and_names(tmp_path: Path) -> None:
    state = tmp_path / "state"
    index = state / "slurmpre" / "jobs.jsonl"
    jobs.remember(jobs.Submitted("40", "plain", "/c/p", "/c/p/logs", 1.0), index)
    jobs.remember(jobs.Submitted("41", "sweep", "/c/s", "/c/s/logs", 2.0, array="0-1"), index)
    env = {**os.environ, "XDG_STATE_HOME": str(state), "_SLURMPRE_COMPLETE": "bash_complete"}

    def complete(words: str) -> list[str]:
        env.update(COMP_WORDS=words, COMP_CWORD=str(len(words.split(" ")) - 1))
        proc = subprocess.run(
            [sys.executable, "-m", "slurmpre"], env=env, capture_output=True, text=True,
            timeout=60, check=True,
        )  # fmt: skip
        return [line.partition(",")[2] for line in proc.stdout.splitlines()]

    assert complete("slurmpre logs ") == ["41_0", "41_1", "41", "sweep", "40", "plain"]
    assert complete("slurmpre cancel 41_") == ["41_0", "41_1"]
    assert complete("slurmpre status sw") == ["sweep"]
