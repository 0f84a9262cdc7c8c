"""A munged that is slow to answer is waited for, never doubled: a second munged started
with --force takes the first one's socket and removes it when it exits, and every sandbox
sharing that munged then fails to authenticate ("munge.socket.2: No such file")."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurmpre import procs
from slurmpre.errors import SandboxError
from slurmpre.sandbox import daemons
from slurmpre.sandbox.roots import Root


@pytest.fixture
def munged() -> Iterator[int]:
    """A process whose command line reads /usr/sbin/munged (python, sleeping)."""
    code = "import time; time.sleep(300)"
    proc = subprocess.Popen(
        ["bash", "-c", f'exec -a /usr/sbin/munged "$0" -c "{code}"', sys.executable]
    )
    try:
        for _ in range(500):
            if procs.is_process_of(proc.pid, "munged"):
                break
            subprocess.run(["sleep", "0.01"], check=True)
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def _root(tmp_path: Path, pid: int | None) -> Root:
    run_dir = tmp_path / "run/munge"
    run_dir.mkdir(parents=True)
    if pid is not None:
        (run_dir / "munged.pid").write_text(f"{pid}\n")
    return Root("sid", tmp_path)


def _no_second(*args: object, **kwargs: object) -> None:
    raise AssertionError(f"a second munged was started: {args}")


def test_a_live_munged_slow_to_answer_is_waited_for_not_doubled(
    tmp_path: Path, munged: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    answers = iter([False, False, True])
    monkeypatch.setattr(daemons, "munge_works", lambda root=None, timeout=15.0: next(answers))
    monkeypatch.setattr(daemons, "spawn_detached", _no_second)
    monkeypatch.setattr(daemons.time, "sleep", lambda s: None)
    assert daemons.start_munge(tmp_path, _root(tmp_path, munged)) is None


def test_a_live_munged_that_never_answers_is_an_error_naming_it(
    tmp_path: Path, munged: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = iter(range(0, 10_000, 7))
    monkeypatch.setattr(daemons, "munge_works", lambda root=None, timeout=15.0: False)
    monkeypatch.setattr(daemons, "spawn_detached", _no_second)
    monkeypatch.setattr(daemons.time, "sleep", lambda s: None)
    monkeypatch.setattr(daemons.time, "monotonic", lambda: float(next(clock)))
    with pytest.raises(SandboxError, match=f"munged \\(pid {munged}\\) runs but"):
        daemons.start_munge(tmp_path, _root(tmp_path, munged))


def test_a_pid_file_of_a_munged_gone_starts_a_new_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    started: list[list[str]] = []

    class Started:
        pid = 4242

        def poll(self) -> None:
            return None

    def detached(argv: list[str], log: Path, **ids: object) -> Started:
        started.append(argv)
        return Started()

    answers = iter([False, True])
    monkeypatch.setattr(daemons, "munge_works", lambda root=None, timeout=15.0: next(answers))
    monkeypatch.setattr(daemons, "spawn_detached", detached)
    monkeypatch.setattr(daemons, "_ids_in", lambda root, user: (0, 0))
    monkeypatch.setattr(daemons.os, "chown", lambda *a: None)
    assert daemons.start_munge(tmp_path, _root(tmp_path, gone.pid)) == 4242
    assert started and started[0][-2:] == ["-F", "--force"]
