"""notice_signal's relay (#23 item 8): the signal reaches the training processes on the
node, never the launcher above them, and the notice counts as taken once it has."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from slurmpre import procs
from slurmpre.job.start.supervise import relay_notice
from slurmpre.job.watch.notice import Notice, write_notice

from tests.conftest import wait_for

# A worker that records the signal; a launcher with no handler of its own (as torchrun
# has none for SIGUSR1, whose default action ends a process).
WORKER = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGUSR1, lambda *a: open(sys.argv[1], 'w').write('got'))\n"
    "time.sleep(60)\n"
)
LAUNCHER = (
    "import subprocess, sys\nsys.exit(subprocess.call([sys.executable, '-c', *sys.argv[1:]]))\n"
)


def relay(
    notice: Path, proc: subprocess.Popen[bytes], *, workers: bool
) -> tuple[threading.Thread, threading.Event, list[int]]:
    stop, taken = threading.Event(), []
    thread = threading.Thread(
        target=relay_notice,
        args=(notice, proc, signal.SIGUSR1, stop),
        kwargs={"workers": workers, "taken": lambda: taken.append(1)},
    )
    thread.start()
    return thread, stop, taken


def test_under_a_launcher_the_workers_get_the_signal_and_the_launcher_lives(
    tmp_path: Path,
) -> None:
    got, notice = tmp_path / "got", tmp_path / "notice"
    proc = subprocess.Popen([sys.executable, "-c", LAUNCHER, WORKER, str(got)])
    thread, stop, taken = relay(notice, proc, workers=True)
    try:
        wait_for("the worker", lambda: procs.children(proc.pid), timeout=30)
        assert taken == []
        write_notice(notice, Notice("drain", "n1", "preempted", time.time()))
        wait_for("the worker's handler", got.exists, timeout=30)
        thread.join(timeout=30)
        assert not thread.is_alive() and taken == [1]
        assert proc.poll() is None  # the launcher was never signalled
    finally:
        stop.set()
        procs.signal_all({proc.pid, *procs.descendants([proc.pid])}, signal.SIGKILL)
        proc.wait()


def test_the_plain_launchers_command_gets_it_itself(tmp_path: Path) -> None:
    got, notice = tmp_path / "got", tmp_path / "notice"
    proc = subprocess.Popen([sys.executable, "-c", WORKER, str(got)])
    write_notice(notice, Notice("drain", "n1", "preempted", time.time()))
    thread, stop, taken = relay(notice, proc, workers=False)
    try:
        wait_for("the handler", got.exists, timeout=30)
        thread.join(timeout=30)
        assert taken == [1] and proc.poll() is None
    finally:
        stop.set()
        proc.kill()
        proc.wait()
