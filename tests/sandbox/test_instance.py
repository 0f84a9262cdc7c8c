"""Sandboxes side by side on one machine: each number its own state folder, ports, node
names, cluster name and configuration (`slurmpre.sandbox.instance`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from slurmpre.errors import UsageError
from slurmpre.sandbox import sharing
from slurmpre.sandbox.config import SandboxConfig, node_specs, render_slurm_conf
from slurmpre.sandbox.instance import Instance, from_env, sandbox_env, state_dir_of
from slurmpre.sandbox.roots import Root


def test_the_first_sandbox_is_the_one_users_know() -> None:
    first = from_env({})
    assert first == Instance(0)
    assert first.state_dir == Path("/var/lib/slurmpre/sandbox")
    assert first.conf == Path("/etc/slurm/slurm.conf")
    assert (first.cluster_name, first.ctld_port) == ("sandbox", 6817)
    assert [n.name for n in node_specs(3, 2, first)] == [
        "gpu-preemptible-dp-1",
        "gpu-preemptible-dp-2",
        "gpu-dp-1",
    ]


def test_no_two_sandboxes_share_a_port_a_node_name_or_a_folder() -> None:
    seen_ports: set[int] = set()
    seen_names: set[str] = set()
    folders = set()
    for number in range(10):
        box = Instance(number)
        specs = node_specs(64, 32, box)  # the largest shape
        ports = {box.ctld_port, *(s.port for s in specs)}
        names = {s.name for s in specs}
        assert len(ports) == 65 and len(names) == 64
        assert not ports & seen_ports and not names & seen_names
        seen_ports |= ports
        seen_names |= names
        folders |= {box.state_dir, box.etc, box.cluster_name}
    assert len(folders) == 30


def test_the_second_sandbox_is_numbered_apart() -> None:
    box = Instance(2)
    assert [n.name for n in node_specs(3, 2, box)] == [
        "gpu-preemptible-dp-201",
        "gpu-preemptible-dp-202",
        "gpu-dp-201",
    ]
    cfg = SandboxConfig("vm", box.state_dir, (26, 5, 5), node_specs(3, 2, box), instance=box)
    lines = render_slurm_conf(cfg).splitlines()
    assert "ClusterName=sandbox2" in lines and "SlurmctldPort=7017" in lines
    assert sandbox_env(box) == {
        "SLURMPRE_SANDBOX": "2",
        "SLURM_CONF": "/etc/slurm/sandbox2/slurm.conf",
        "SLURMPRE_PORT_OFFSET": "3000",
    }


@pytest.mark.parametrize("bad", ["x", "-1", "10", "1.5"])
def test_a_bad_number_is_one_line(bad: str) -> None:
    with pytest.raises(UsageError, match=r"give a number from 0 to 9") as err:
        from_env({"SLURMPRE_SANDBOX": bad})
    assert "\n" not in str(err.value)


def test_the_state_folder_can_still_be_given() -> None:
    env = {"SLURMPRE_SANDBOX": "3", "SLURMPRE_SANDBOX_DIR": "/srv/box"}
    assert state_dir_of(env) == Path("/srv/box")
    assert state_dir_of({"SLURMPRE_SANDBOX": "3"}) == Path("/var/lib/slurmpre/sandbox3")


def test_a_bad_number_on_the_command_line_is_one_line_and_exit_2() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "slurmpre", "sandbox", "status"],
        capture_output=True,
        text=True,
        env={"SLURMPRE_SANDBOX": "eleven", "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr == (
        "slurmpre: error: SLURMPRE_SANDBOX='eleven': give a number from 0 to 9\n"
    )


def test_the_last_sandbox_down_stops_munged_and_an_earlier_one_hands_it_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """munged and a root's mounts are shared: the first one down hands its munged to one
    still up on the same Slurm, and leaves the root mounted; the last one stops both."""
    monkeypatch.setattr(sharing, "STATE_ROOT", tmp_path)
    me, other, elsewhere = tmp_path / "sandbox", tmp_path / "sandbox1", tmp_path / "sandbox2"
    alive = subprocess.Popen(["sleep", "300"])  # stands for the others' slurmctld
    try:
        monkeypatch.setattr(sharing.procs, "is_process_of", lambda pid, name: pid == alive.pid)
        for folder, root in ((other, "/roots/sid"), (elsewhere, None)):
            folder.mkdir()
            state = {"slurmctld": alive.pid, "nodes": [], "root": root, "suite": "sid"}
            (folder / "sandbox.json").write_text(json.dumps(state))
        me.mkdir()
        unmounted: list[Root] = []
        monkeypatch.setattr(Root, "unmount", lambda self: unmounted.append(self))
        handed: list[tuple[Path, int]] = []
        stopped: list[list[int]] = []
        monkeypatch.setattr(sharing.procs, "stop", lambda pids, grace: stopped.append(pids))
        root = Root("sid", Path("/roots/sid"))
        sharing.leave(me, root, alive.pid, lambda o, p: handed.append((o, p)) or True)
        assert handed == [(other, alive.pid)] and not stopped and not unmounted
        # The other could not take it (its lock held): never stopped under it.
        sharing.leave(me, root, alive.pid, lambda o, p: False)
        assert not stopped and not unmounted
        # The host's Slurm: the other on the host is up, the one in the root is not its.
        (other / "sandbox.json").unlink()
        sharing.leave(me, root, alive.pid, lambda o, p: handed.append((o, p)) or True)
        assert stopped == [[alive.pid]] and unmounted == [root]
    finally:
        alive.kill()
        alive.wait()
