"""The wrapper under real srun on the sandbox, and its process hygiene."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from slurmpre.folder.checkpoints import writing
from slurmpre.folder.ledger import Ledger
from slurmpre.job.start.run import Watching
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.slurm.client import CommandLineSlurm

from tests.conftest import wait_for, wait_preemptible_idle
from tests.records import dicts

WRAPPER = [sys.executable, "-m", "slurmpre.job", "run"]


def srun(*args: str, nodes: int = 2, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            "srun",
            f"--nodes={nodes}",
            "--ntasks-per-node=1",
            "--kill-on-bad-exit=1",
            "--constraint=preemptible",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_outside_a_job_is_one_line_exit_1(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    proc = subprocess.run(
        [*WRAPPER, "--checkpoint-dir", str(tmp_path), "--", "true"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert proc.returncode == 1
    assert proc.stderr == "slurmpre run: error: not inside a Slurm job (SLURM_JOB_ID is not set)\n"


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (
            ["--nproc-per-node", "0", "--checkpoint-dir", "/tmp", "--", "true"],
            2,
            "--nproc-per-node must be from 1 to 1024, got 0",
        ),
        (["--checkpoint-dir", "/tmp"], 2, "give the command to run after --"),
        (
            ["--launcher", "mpi", "--checkpoint-dir", "/tmp", "--", "true"],
            2,
            "argument --launcher: invalid choice: 'mpi'",
        ),
    ],
)
def test_bad_arguments(args: list[str], code: int, message: str) -> None:
    proc = subprocess.run([*WRAPPER, *args], capture_output=True, text=True, check=False)
    assert proc.returncode == code
    assert proc.stderr.startswith(f"slurmpre run: error: {message}")
    assert len(proc.stderr.splitlines()) == 1


@pytest.mark.sandbox
def test_missing_checkpoint_folder_and_command_inside_a_job(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    proc = srun(*WRAPPER, "--checkpoint-dir", str(tmp_path / "nope"), "--", "true", nodes=1)
    assert proc.returncode == 1
    assert (
        f"slurmpre run: error: checkpoint folder '{tmp_path / 'nope'}' does not exist"
        in proc.stderr
    )
    proc = srun(*WRAPPER, "--checkpoint-dir", str(tmp_path), "--", "no-such-program-x", nodes=1)
    assert proc.returncode == 2
    assert "slurmpre run: error: command not found: 'no-such-program-x'" in proc.stderr
    assert not list(tmp_path.iterdir())  # nothing written


@pytest.mark.sandbox
def test_all_nodes_resume_from_the_choice_of_node_0(sandbox: Sandbox, shared_tmp: Path) -> None:
    ckpt = shared_tmp / "agree"
    with writing(ckpt, 1) as path:
        (path / "w").write_text("1")
    # Node 0's child commits a newer checkpoint at once: the other node must not pick it up.
    script = (
        "import json, os, pathlib, time\n"
        "from slurmpre.folder.checkpoints import writing\n"
        "d = pathlib.Path(os.environ['SLURMPRE_CHECKPOINT_DIR'])\n"
        "if os.environ['SLURM_NODEID'] == '0':\n"
        "    with writing(d, 2) as p: (p / 'w').write_text('2')\n"
        "time.sleep(1)\n"
        "keys = ['SLURMPRE_RESUME_FROM', 'SLURMPRE_RESUME_STEP', 'SLURMPRE_RESTART_COUNT',\n"
        "        'SLURMPRE_WORLD_SIZE', 'SLURMPRE_JOB_TAG']\n"
        "(d / ('seen-' + os.environ['SLURM_NODEID'])).write_text("
        "json.dumps({k: os.environ[k] for k in keys}))\n"
    )
    proc = srun(
        *WRAPPER,
        "--launcher",
        "plain",
        "--checkpoint-dir",
        str(ckpt),
        "--",
        sys.executable,
        "-c",
        script,
    )
    assert proc.returncode == 0, proc.stderr
    seen = [json.loads((ckpt / f"seen-{i}").read_text()) for i in (0, 1)]
    assert seen[0] == seen[1]
    assert seen[0]["SLURMPRE_RESUME_FROM"] == str(ckpt / "step-00000001")
    assert seen[0]["SLURMPRE_RESUME_STEP"] == "1"
    assert (seen[0]["SLURMPRE_RESTART_COUNT"], seen[0]["SLURMPRE_WORLD_SIZE"]) == ("0", "2")
    starts = [r for r in dicts(Ledger(ckpt)) if r["event"] == "start"]
    assert len(starts) == 1 and starts[0]["resume_from"] == str(ckpt / "step-00000001")
    ends = [r for r in dicts(Ledger(ckpt)) if r["event"] == "end"]
    assert ends[0]["exit_code"] == 0


@pytest.mark.sandbox
def test_exit_code_passes_through_and_a_dead_node_ends_the_step(
    sandbox: Sandbox, shared_tmp: Path
) -> None:
    wait_preemptible_idle(CommandLineSlurm())  # so the timing below is the step's alone

    def plain(script: str, nodes: int) -> subprocess.CompletedProcess[str]:
        args = ["--launcher", "plain", "--checkpoint-dir", str(shared_tmp)]
        return srun(*WRAPPER, *args, "--", "bash", "-c", script, nodes=nodes)

    assert plain("exit 7", nodes=1).returncode == 7
    started = time.monotonic()
    assert plain('[ "$SLURM_NODEID" = 1 ] && exit 3; sleep 600', nodes=2).returncode != 0
    assert time.monotonic() - started < 60  # ended, not hung for 600 s


# The wrapper around its child (`run._train`), for a test's own wrapper process.
SUPERVISE = (
    "from slurmpre.job.start.supervise import Supervisor\n"
    "def supervise(command, env):\n"
    "    with Supervisor() as supervisor:\n"
    "        if supervisor.start(command, env) is None:\n"
    "            return 128 + (supervisor.stopped or 15)\n"
    "        return supervisor.wait()\n"
)


def test_signals_reach_the_whole_child_tree(tmp_path: Path) -> None:
    """SIGTERM to the wrapper reaches the child and its grandchild; exit 128+15."""
    pids = tmp_path / "pids"
    code = (
        "import sys\n"
        f"{SUPERVISE}"
        f"sys.exit(supervise(['bash', '-c', 'sleep 600 & echo $$ $! > {pids}; wait'], {{}}))\n"
    )
    env = {**os.environ, "PATH": os.environ["PATH"]}
    wrapper = subprocess.Popen([sys.executable, "-c", code], env=env)
    text = wait_for(
        "the child tree", lambda: pids.exists() and pids.read_text().strip(), timeout=10
    )
    child, grandchild = map(int, text.split())
    wrapper.send_signal(signal.SIGTERM)
    assert wrapper.wait(timeout=10) == 128 + signal.SIGTERM
    for pid in (child, grandchild):
        wait_for(f"pid {pid} to end", lambda p=pid: not _alive(p), timeout=10)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_a_killed_wrapper_leaves_no_training_process_behind(tmp_path: Path) -> None:
    """As torchrun's workers do, the grandchild lives in a session of its own and ignores
    SIGTERM; SIGKILL the wrapper (Slurm after KillWait): the guard still ends it."""
    pids = tmp_path / "pids"
    grandchild = (
        "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        f"open({str(pids)!r}, 'w').write(str(os.getpid())); time.sleep(600)"
    )
    child = f"setsid {sys.executable} -c {shlex.quote(grandchild)} & wait"
    # The real guard, behind a tee that records the pids of each snapshot it receives:
    # the test waits until one holds the grandchild (no race with the 2 s tracking).
    record = tmp_path / "guard-knows"
    tee = (
        "import os, sys\n"
        "from slurmpre.job.start import guard\n"
        "def lines():\n"
        "    pids = []\n"
        "    for line in sys.stdin:\n"
        "        if line.strip():\n"
        "            pids.append(line.split()[0])\n"
        "        else:\n"
        f"            open({str(record)!r} + '.tmp', 'w').write(' '.join(pids))\n"
        f"            os.replace({str(record)!r} + '.tmp', {str(record)!r})\n"
        "            pids = []\n"
        "        yield line\n"
        "guard.main(lines())\n"
    )
    code = (
        "import subprocess, sys\n"
        "from slurmpre.job.start import supervise as s\n"
        "def start_guard():\n"
        "    with s.warning_blocked():\n"
        f"        return subprocess.Popen([sys.executable, '-c', {tee!r}],\n"
        "            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,\n"
        "            stderr=subprocess.DEVNULL, start_new_session=True, text=True)\n"
        "s._start_guard = start_guard\n"
        f"{SUPERVISE}"
        f"sys.exit(supervise(['bash', '-c', {child!r}], {{}}))\n"
    )
    wrapper = subprocess.Popen([sys.executable, "-c", code])
    pid = int(wait_for("the grandchild", lambda: pids.exists() and pids.read_text(), timeout=10))
    wait_for(
        "a snapshot holding the grandchild to reach the guard",
        lambda: record.exists() and str(pid) in record.read_text().split(),
        timeout=30,
    )
    wrapper.kill()
    wrapper.wait(timeout=10)
    wait_for(f"grandchild {pid} to be ended by the guard", lambda: not _alive(pid), timeout=15)


def test_the_warning_is_kept_never_reaches_the_training_and_other_signals_do(
    tmp_path: Path,
) -> None:
    """SIGUSR2 to the wrapper is latched, not forwarded; the child starts with it ignored, so
    even one sent straight to its group kills nothing; SIGUSR1 is forwarded to the child."""
    ready, usr1 = tmp_path / "ready", tmp_path / "usr1"
    child = (
        "import os, signal, time\n"
        f"signal.signal(signal.SIGUSR1, lambda *_: open({str(usr1)!r}, 'a').write('usr1'))\n"
        f"open({str(ready)!r}, 'w').write(str(os.getpid()))\n"
        "while True:\n"
        "    time.sleep(0.1)\n"
    )
    code = (
        "import signal, sys\n"
        "from slurmpre.signals import WARN_SIGNAL, Latch\n"
        "latch = Latch()\n"
        "signal.signal(WARN_SIGNAL, latch)\n"
        f"{SUPERVISE}"
        f"status = supervise([sys.executable, '-c', {child!r}], {{}})\n"
        "print('warned' if latch.at else 'not warned', flush=True)\n"
        "sys.exit(status)\n"
    )
    wrapper = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    pid = None
    try:
        pid = int(wait_for("the child", lambda: ready.exists() and ready.read_text().strip()))
        wrapper.send_signal(signal.SIGUSR2)
        os.killpg(pid, signal.SIGUSR2)  # as if Slurm signalled every process it tracks
        # The kernel gives a signal to any of the wrapper's threads that does not block it,
        # and skips a thread with one already pending: a warning followed at once by another
        # signal is how one lands on a helper thread. Each must still reach the child at once.
        for n in range(1, 21):
            wrapper.send_signal(signal.SIGUSR2)
            wrapper.send_signal(signal.SIGUSR1)
            wait_for(
                f"SIGUSR1 number {n} to reach the child",
                lambda n=n: usr1.exists() and usr1.read_text().count("usr1") == n,
                timeout=10,
            )
        assert _alive(pid)
        wrapper.send_signal(signal.SIGTERM)
        out, _ = wrapper.communicate(timeout=10)
    finally:  # a failed run leaves nothing behind
        wrapper.kill()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
    assert out.strip() == "warned"
    assert wrapper.returncode == 128 + signal.SIGTERM


def test_the_warning_is_ignored_while_the_wrapper_exits() -> None:
    """Python restores default signal actions as it exits; a time-limit warning landing
    then killed node 1's wrapper at the end of a job (srun: task 1: User defined
    signal 2, the job FAILED). The wrapper leaves the warning ignored instead."""
    probe = (
        "import runpy, signal, sys\n"
        "sys.argv = ['slurmpre.job', 'run', '--checkpoint-dir', '/nonexistent', '--', 'true']\n"
        "try:\n"
        "    runpy.run_module('slurmpre.job', run_name='__main__')\n"
        "except SystemExit as exc:\n"
        "    print(exc.code, signal.getsignal(signal.SIGUSR2) == signal.SIG_IGN)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=False
    )
    assert proc.stdout.split() == ["1", "True"], proc.stderr


def test_the_requeue_is_recorded_though_slurm_ends_the_step_before_scontrol_returns(
    tmp_path: Path,
) -> None:
    """The requeue the watcher asks for makes Slurm signal the wrapper while `scontrol
    requeue` returns; the wrapper stays to write the requeue and the attempt's end."""
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).parent / "killed_on_requeue.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    events = [r["event"] for r in dicts(Ledger(tmp_path))]
    assert events[-2:] == ["requeued", "end"], (events, proc.stderr)


class _Built:
    """A stand-in for the watcher: says when it was built, started and stopped."""

    def __init__(self) -> None:
        self.built = threading.Event()
        self.started = threading.Event()
        self.stopped = False

    def build(self) -> _Built:
        self.built.set()
        return self

    def start(self) -> None:
        self.started.set()

    def stop(self) -> None:
        self.stopped = True


def watching(monkeypatch: pytest.MonkeyPatch, give_way: float) -> tuple[_Built, Watching]:
    """A `Watching` of a stand-in watcher that waits at most ``give_way`` s for the launch."""
    monkeypatch.setattr(Watching, "GIVE_WAY", give_way)
    fake = _Built()
    return fake, Watching(fake.build)  # type: ignore[arg-type]


def test_the_watcher_is_built_once_the_training_is_launched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake, w = watching(monkeypatch, 3600.0)
    assert not fake.built.wait(0.3)  # gives way to the launch ...
    w.launched()
    assert fake.started.wait(60)  # ... and is built and started once it is done
    assert w.get() is fake
    w.stop()
    assert fake.stopped


def test_a_launch_held_up_does_not_hold_up_the_watcher(monkeypatch: pytest.MonkeyPatch) -> None:
    """Node 0 held in its choice (a successor waiting for its predecessor) is watched."""
    fake, w = watching(monkeypatch, 0.05)
    assert fake.started.wait(60)
    w.stop()


def test_a_wrapper_that_ends_before_the_launch_builds_no_watcher(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake, w = watching(monkeypatch, 3600.0)
    w.stop()
    assert w.get() is None and not fake.started.is_set()
