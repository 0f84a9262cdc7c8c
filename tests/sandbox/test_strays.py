"""`sandbox up` and `down` find the sandbox's daemons by how it starts them, so one its
state lost track of (a killed drill's helper restarted it) no longer holds a port the
next sandbox needs, and a system's own Slurm daemons are never taken for one."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurmpre import procs
from slurmpre.sandbox import daemons

CONF = "/etc/slurm/slurm.conf"


@pytest.fixture
def spawn() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        p.kill()
        p.wait()


def named(spawn: list[subprocess.Popen[bytes]], argv0: str, *args: str) -> int:
    """A process whose command line reads ``argv0 ...args`` (python, sleeping)."""
    code = "import time; time.sleep(300)"
    proc = subprocess.Popen(  # exec -a sets what /proc/PID/cmdline shows first
        ["bash", "-c", f'exec -a {argv0} "$0" -c "{code}" "$@"', sys.executable, *args]
    )
    spawn.append(proc)
    for _ in range(200):
        if procs.cmdline(proc.pid)[:1] == [argv0]:
            return proc.pid
        subprocess.run(["sleep", "0.01"], check=True)
    raise AssertionError(f"{argv0} did not start: {procs.cmdline(proc.pid)}")


def test_the_sandboxs_daemons_are_found_by_how_it_starts_them_and_only_those(
    tmp_path: Path, spawn: list[subprocess.Popen[bytes]]
) -> None:
    node = named(spawn, "slurmd", "-D", "-N", "gpu-preemptible-dp-1", "-f", CONF)
    ctld = named(spawn, "/usr/sbin/slurmctld", "-D", "-i", "-f", CONF)
    system_d = named(spawn, "slurmd", "-D", "-s")  # systemd's: no -f, no -N
    single = named(spawn, "slurmd", "-D", "-f", CONF)  # one slurmd per host: not ours
    other_conf = named(spawn, "slurmctld", "-D", "-f", "/opt/slurm/etc/slurm.conf")
    not_slurm = named(spawn, "python3", "-D", "-N", "x", "-f", CONF)
    found = daemons.running()
    assert {node, ctld} <= found
    assert not {system_d, single, other_conf, not_slurm} & found


def test_a_nodes_slurmds_are_found_whatever_pid_the_state_recorded(
    spawn: list[subprocess.Popen[bytes]],
) -> None:
    """`sandbox preempt` kills every slurmd running as the node it removes (one the
    state lost track of brought a removed node back), and a restore starts none beside one."""
    first = named(spawn, "slurmd", "-D", "-N", "gpu-preemptible-dp-2", "-f", CONF)
    second = named(spawn, "/usr/sbin/slurmd", "-D", "-N", "gpu-preemptible-dp-2", "-f", CONF)
    other = named(spawn, "slurmd", "-D", "-N", "gpu-preemptible-dp-1", "-f", CONF)
    ctld = named(spawn, "slurmctld", "-D", "-i", "-f", CONF)
    assert {first, second} <= daemons.running("gpu-preemptible-dp-2")
    assert not {other, ctld} & daemons.running("gpu-preemptible-dp-2")
    assert other in daemons.running("gpu-preemptible-dp-1")
    assert not daemons.running("gpu-dp-1") & {first, second, other, ctld}


def test_a_sandbox_beside_the_first_is_not_taken_for_its_strays(
    spawn: list[subprocess.Popen[bytes]],
) -> None:
    """Sandboxes side by side (`SLURMPRE_SANDBOX`): `up` of one stops its own strays, never
    the daemons of another, which read another slurm.conf."""
    beside = "/etc/slurm/sandbox1/slurm.conf"
    mine = named(spawn, "slurmctld", "-D", "-i", "-f", CONF)
    theirs = named(spawn, "slurmctld", "-D", "-i", "-f", beside)
    their_node = named(spawn, "slurmd", "-D", "-N", "gpu-dp-101", "-f", beside)
    assert mine in daemons.running() and not {theirs, their_node} & daemons.running()
    assert {theirs, their_node} <= daemons.running(conf=beside)
    assert mine not in daemons.running(conf=beside)


def test_only_a_helper_that_still_runs_as_one_is_stopped_at_down(
    tmp_path: Path, spawn: list[subprocess.Popen[bytes]]
) -> None:
    """A helper's pid, once it has ended, is soon another process's: `down` must not stop
    that one (it once stopped a test's own process when pids wrapped)."""
    from slurmpre.sandbox.config import State

    fake = tmp_path / "slurmpre"  # `python -m slurmpre` from here runs this one: it sleeps
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "__main__.py").write_text("import time\ntime.sleep(300)\n")

    def started(argv: list[str]) -> int:
        proc = subprocess.Popen(argv, cwd=tmp_path)
        spawn.append(proc)
        for _ in range(500):
            if procs.cmdline(proc.pid) == argv:
                return proc.pid
            subprocess.run(["sleep", "0.01"], check=True)
        raise AssertionError(f"{argv} did not start: {procs.cmdline(proc.pid)}")

    ours = started([sys.executable, *daemons.HELPER_COMMAND, "n1"])
    another_sandboxs = started([sys.executable, *daemons.HELPER_COMMAND, "n201"])
    stranger = started(["sleep", "300"])
    gone = subprocess.Popen(["true"])
    gone.wait()
    nodes = [{"name": "n1"}, {"name": "n2"}]
    helpers = [ours, another_sandboxs, stranger, gone.pid]
    state = State(version=[26, 5, 5], timings="tuned", nodes=nodes, helpers=helpers)
    assert daemons.helpers_running(state) == {ours}
