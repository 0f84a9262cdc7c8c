"""`sandbox up --shared-dir DIR --shared-mbps N` (#51 item 5): a shared filesystem of capped
bandwidth that the host and every node see as the same files, and a folder per node.

The first tests need no cluster. The last brings up a sandbox of its own (number 7, one
node: a shape no worker's cluster has) and takes it down again."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shlex
import subprocess
import time
from pathlib import Path

import pytest
from slurmpre.errors import UsageError
from slurmpre.sandbox import shared_fs
from slurmpre.sandbox.asked import Asked, SharedDir, refuse_another_shape
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.sandbox.config import (
    SandboxConfig,
    State,
    node_specs,
    render_slurm_conf,
    render_task_prolog,
)
from slurmpre.sandbox.instance import Instance
from slurmpre.sandbox.seen import job_python
from slurmpre.slurm import states

from tests.conftest import slurmpre_cli, wait_for

OWN = Instance(7)  # the sandbox the cluster test brings up and down


def test_the_shared_dir_and_its_rate_are_checked_before_anything_starts(tmp_path: Path) -> None:
    state = tmp_path / "state"
    full = tmp_path / "full"
    (full / "x").mkdir(parents=True)
    (tmp_path / "file").write_text("")
    cases = {
        (None, 8.0): "--shared-mbps caps the filesystem of --shared-dir: give both",
        ("/", 8.0): "--shared-dir /: give a folder of its own",
        (str(full), None): f"--shared-dir {full}: not empty (give an empty or new folder)",
        (str(tmp_path / "file"), None): f"--shared-dir {tmp_path / 'file'}: not a folder",
        (str(state / "in"), 8.0): f"--shared-dir {state / 'in'}: it would hold or lie inside "
        f"the sandbox's state ({state})",
        (str(tmp_path), 8.0): f"--shared-dir {tmp_path}: it would hold or lie inside "
        f"the sandbox's state ({state})",
        (str(tmp_path / "new"), 0.0): "--shared-mbps must be above 0 (MB/s: 10**6 bytes a "
        "second), got 0",
        (str(tmp_path / "new"), float("inf")): "--shared-mbps must be above 0 (MB/s: 10**6 "
        "bytes a second), got inf",
    }
    for (given, mbps), message in cases.items():
        with pytest.raises(UsageError) as info:
            shared_fs.checked(given, mbps, state, OWN)
        assert str(info.value) == message
    new = shared_fs.checked(str(tmp_path / "a" / ".." / "new"), 16.0, state, OWN)
    assert new == SharedDir(tmp_path / "new", 16.0)
    assert new.backing == tmp_path / ".new.slowfs"  # beside it, hidden
    assert shared_fs.checked(None, None, state, OWN) is None


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    env = {"SLURMPRE_SANDBOX": "7", "SLURMPRE_SANDBOX_DIR": str(tmp_path / "state")}
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    for args, said in (
        (["--shared-mbps", "8"], "--shared-mbps caps the filesystem of --shared-dir: give both"),
        (["--shared-dir", "/"], "--shared-dir /: give a folder of its own"),
        (
            ["--shared-dir", str(tmp_path / "full"), "--shared-mbps", "8"],
            f"--shared-dir {tmp_path / 'full'}: not empty (give an empty or new folder)",
        ),
    ):
        proc = slurmpre_cli("sandbox", "up", "--nodes", "1", "--preemptible", "1", *args, env=env)
        assert (proc.returncode, proc.stderr) == (2, f"slurmpre: error: {said}\n")
    assert not (tmp_path / "state").exists()  # nothing started


def test_a_sandbox_up_with_another_shared_dir_is_refused_in_one_line() -> None:
    specs = node_specs(1, 1, OWN)
    shared = SharedDir(Path("/srv/ckpt"), 16.0)
    state = State(
        version=[26, 5, 5],
        timings="tuned",
        nodes=[{"name": s.name, "preemptible": s.preemptible} for s in specs],
        tracking="pgid",
        shared=shared.record(pid=123),
    )
    refuse_another_shape(state, Asked(specs, shared=shared))  # the same: harmless
    # None asked keeps the one up (after the drill's big-state scene, the suite's own up).
    refuse_another_shape(state, Asked(specs))
    with pytest.raises(UsageError, match=r"Slurm 26\.05\.5, no shared dir"):
        refuse_another_shape(dataclasses.replace(state, shared=None), Asked(specs, shared=shared))
    for other in (SharedDir(Path("/srv/ckpt"), 8.0), SharedDir(Path("/srv/other"), 16.0)):
        with pytest.raises(UsageError) as info:
            refuse_another_shape(state, Asked(specs, shared=other))
        assert str(info.value) == (
            "the sandbox is up with 1 nodes (1 preemptible, tuned timings, proctrack/pgid, "
            "Slurm 26.05.5, shared /srv/ckpt at 16 MB/s); run `slurmpre sandbox down` first "
            "to change its shape"
        )


def test_each_node_is_told_its_own_folder(tmp_path: Path) -> None:
    cfg = SandboxConfig(
        "vm", tmp_path / "state dir", (26, 5, 5), node_specs(2, 1, OWN), instance=OWN
    )
    assert f"TaskProlog={tmp_path / 'state dir' / 'task-prolog'}" in render_slurm_conf(cfg)
    prolog = tmp_path / "prolog"
    prolog.write_text(render_task_prolog(cfg))
    out = subprocess.run(
        ["sh", str(prolog)],
        env={"SLURMD_NODENAME": "gpu-dp-701", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out == (
        f"export SLURMPRE_NODE_LOCAL_DIR={cfg.local_dir('gpu-dp-701')}\n"
        f"export SLURMPRE_PORT_OFFSET={OWN.port_offset}\n"  # whatever the job was submitted with
    )
    # In RAM, as a node's /dev/shm: another volume than the shared one (`slurmpre.tier`).
    ram = Path("/dev/shm")
    root = ram / "slurmpre-sandbox7" if ram.is_dir() else tmp_path / "state dir" / "local"
    assert cfg.local_dir("gpu-dp-701") == root / "gpu-dp-701"


# -- on a sandbox of its own -------------------------------------------------------------
def _fs_left() -> list[str]:
    """What is left of sandbox 7's filesystem: its mounts and its server's pids."""
    return shared_fs.points(OWN) + [f"pid {p}" for p in shared_fs.servers(OWN)]


@pytest.mark.sandbox
@pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox runs as root")
@pytest.mark.skipif(not shared_fs.DEV_FUSE.exists(), reason="this host has no /dev/fuse")
def test_a_capped_shared_dir_is_the_same_files_on_the_host_and_on_a_node(
    tmp_path: Path,
) -> None:
    env = {"SLURMPRE_SANDBOX": str(OWN.number)}
    shared = tmp_path / "shared dir"  # a space: /proc/mounts escapes it
    up = ["sandbox", "up", "--nodes", "1", "--preemptible", "1"]
    slurmpre_cli("sandbox", "down", env=env)  # a shape of its own: whatever was up goes
    slurmpre_cli(*up, "--shared-dir", str(shared), "--shared-mbps", "8", env=env, check=True)
    box = Sandbox(instance=OWN)
    try:
        state = box.current()
        assert state.shared is not None and state.shared["mbps"] == 8.0
        assert box.root is None or str(box.root.path / str(shared).lstrip("/")) in (
            shared_fs.points(OWN)
        )  # the nodes' root sees the mount itself, not the folder under it
        said = slurmpre_cli("sandbox", "status", env=env, check=True).stdout
        assert f"shared     {shared} at 8 MB/s (FUSE, pid {state.shared['pid']} mounted" in said

        data = os.urandom(32 * 10**6)
        start = time.monotonic()
        with (shared / "blob").open("wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        wrote = time.monotonic() - start
        assert wrote >= 32 / 8 * 0.8, f"32 MB written in {wrote:.2f} s: the cap is not held"

        node = state.nodes[0]["name"]
        report = tmp_path / "read.txt"
        reader = (
            "import hashlib, os, sys, time; t = time.monotonic(); "
            "d = open(sys.argv[1], 'rb').read(); s = time.monotonic() - t; "
            "local = os.environ['SLURMPRE_NODE_LOCAL_DIR']; "
            "print(len(d), s, hashlib.sha256(d).hexdigest(), local, os.path.isdir(local))"
        )
        python = job_python(box.root, box.state_dir)
        script = (
            f"#!/bin/sh\nexec {shlex.quote(python)} -c {shlex.quote(reader)} "
            f"{shlex.quote(str(shared / 'blob'))} > {shlex.quote(str(report))}\n"
        )
        job = box.client.submit(script, args=[f"--output={tmp_path}/job-%j.out"])
        info = wait_for(
            "the reading job to end",
            lambda: (j := box.client.job(job)).state in states.FINISHED and j,
            timeout=120,
        )
        assert info.state == states.COMPLETED, (tmp_path / f"job-{job}.out").read_text()
        size, seconds, digest, local, is_dir = report.read_text().split()
        assert int(size) == len(data) and digest == hashlib.sha256(data).hexdigest()
        assert float(seconds) >= 32 / 8 * 0.8, f"read on {node} in {seconds} s"
        assert local == str(box.config().local_dir(node)) and is_dir == "True"
    finally:
        slurmpre_cli("sandbox", "down", env=env, check=True)
    assert _fs_left() == []
    assert list(shared.iterdir()) == []  # an empty folder again; the files lie beside it
    assert (tmp_path / ".shared dir.slowfs" / "blob").stat().st_size == len(data)
