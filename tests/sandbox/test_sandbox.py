"""The sandbox against itself: a real slurmctld and slurmds on this machine."""

from __future__ import annotations

import dataclasses
import re
import shlex
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
from slurmpre.sandbox import daemons
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.sandbox.preempt import restore_node
from slurmpre.slurm.client import CommandLineSlurm

from tests.conftest import INSTANCE, PREEMPTIBLE, STANDARD, slurmpre_cli, wait_for

pytestmark = pytest.mark.sandbox

P1, P2 = PREEMPTIBLE  # this worker's sandbox's nodes (gpu-preemptible-dp-1 in sandbox 0)
(S1,) = STANDARD

# Each attempt appends a line; a TERM before the node is removed would be logged.
ATTEMPT_SCRIPT = """#!/bin/bash
trap 'echo "signal TERM at $(date +%s.%N) restart=${SLURM_RESTART_COUNT:-0}" >> {log}' TERM
echo "attempt restart=${SLURM_RESTART_COUNT:-unset}" \\
     "nodes=$SLURM_JOB_NODELIST n=$SLURM_JOB_NUM_NODES" >> {log}
srun bash -c 'sleep 600' &
wait
"""


def _submit(slurm: CommandLineSlurm, script: str, *args: str) -> str:
    return slurm.submit(script, args=args)


def test_up_twice_is_harmless(sandbox: Sandbox) -> None:
    before = sandbox.load()
    proc = slurmpre_cli("sandbox", "up", check=True)
    said = proc.stdout.strip().splitlines()
    assert said[0] == "sandbox already up"
    if sandbox.root is not None:  # and, for a root's Slurm, how to reach its commands
        assert said[1:] == [
            f"Slurm's commands for this sandbox run in {sandbox.root.path}: "
            f"export PATH={sandbox.root.shims}:$PATH"
        ]
    else:
        assert said[1:] == []
    # Unchanged, but for a munged another sandbox beside it may have handed over meanwhile.
    after = sandbox.load()
    assert before is not None and after is not None
    assert dataclasses.replace(after, munged=None) == dataclasses.replace(before, munged=None)


def test_up_with_another_shape_is_refused(sandbox: Sandbox) -> None:
    proc = slurmpre_cli("sandbox", "up", "--nodes", "4")
    assert proc.returncode == 2
    assert proc.stderr.startswith("slurmpre: error: the sandbox is up with 3 nodes")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_slurm_commands_work_in_a_fresh_shell(sandbox: Sandbox) -> None:
    """The host's commands, or a root's: a login shell finds them first (up wrote
    /etc/profile.d/slurmpre-sandbox.sh; down removes it)."""
    out = subprocess.run(
        # Sandboxes beside the first are named by SLURM_CONF (as `sandbox_env` sets it).
        [
            "env",
            "-i",
            "PATH=/usr/bin:/bin",
            f"SLURM_CONF={INSTANCE.conf}",
            "bash",
            "-lc",
            "sinfo -h -N -o '%N %f'",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"{P1} preemptible" in out
    assert f"{S1} standard" in out


def test_status_says_what_runs_where(sandbox: Sandbox) -> None:
    proc = slurmpre_cli("sandbox", "status", check=True)
    assert proc.stdout.startswith("sandbox: up; Slurm ")
    for node in (P1, P2, S1):
        assert re.search(rf"{node}\s+\w+\s+pid \d+ running", proc.stdout)


def test_bad_input_gets_one_line_and_exit_2(sandbox: Sandbox) -> None:
    proc = slurmpre_cli("sandbox", "preempt", "no-such-node", "--window", "1")
    assert proc.returncode == 2
    assert proc.stderr == (
        f"slurmpre: error: unknown sandbox node 'no-such-node' (nodes: {P1}, {P2}, {S1})\n"
    )
    proc = slurmpre_cli("sandbox", "preempt", S1, "--window", "-3")
    assert proc.returncode == 2
    assert proc.stderr == "slurmpre: error: --window must be 0 seconds or more, got -3\n"


def test_preemptible_constraint_places_jobs_only_there(
    slurm: CommandLineSlurm, shared_tmp: Path
) -> None:
    log = shared_tmp / "where.txt"
    script = f"#!/bin/bash\nsrun bash -c 'echo $SLURMD_NODENAME' >> {shlex.quote(str(log))}\n"
    ids = [
        _submit(
            slurm,
            script,
            "--constraint=preemptible",
            "--requeue",
            "--nodes=1-2",
            f"--output={shared_tmp}/slurm-%j.out",
        )
        for _ in range(4)
    ]
    wait_for("jobs to finish", lambda: all(slurm.job(i).finished for i in ids), timeout=90)
    assert {slurm.job(i).state for i in ids} == {"COMPLETED"}
    seen = set(log.read_text().split())
    assert seen and seen <= set(PREEMPTIBLE)


def test_preempt_drains_then_removes_and_the_job_restarts_on_the_rest(
    sandbox: Sandbox, slurm: CommandLineSlurm, shared_tmp: Path
) -> None:
    log = shared_tmp / "attempts.txt"
    job = _submit(
        slurm,
        ATTEMPT_SCRIPT.replace("{log}", shlex.quote(str(log))),
        "--constraint=preemptible",
        "--requeue",
        "--nodes=1-2",
        f"--output={shared_tmp}/slurm-%j.out",
    )
    wait_for("the job on both preemptible nodes", lambda: len(slurm.job(job).nodes) == 2)
    wait_for("the first attempt to start", lambda: log.exists() and log.read_text())
    victim = P2
    try:
        timeline = subprocess.Popen(
            [sys.executable, "-m", "slurmpre", "sandbox", "preempt", victim, "--window", "5"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # T+0: drained, no new jobs, the job keeps running and hears nothing.
        wait_for("the drain", lambda: slurm.nodes([victim])[0].draining, timeout=10)
        assert slurm.job(job).state == "RUNNING"
        out, err = timeline.communicate(timeout=60)
        assert timeline.returncode == 0, err
        lines = out.strip().splitlines()
        assert re.search(rf"T\+0\.\ds drain {P2} \(reason: preempted\)", lines[0])
        assert f"running jobs: {job}" in lines[0]
        removal = float(re.search(r"T\+(\d+\.\d)s remove", lines[1]).group(1))  # type: ignore[union-attr]
        assert 5.0 <= removal < 7.0
        assert f"jobs it ended: {job}" in lines[1]
        # Removed: slurmd is gone and Slurm has the node DOWN (what brings it back later is
        # another test's business; say what runs as it, should it not be down).
        gone = slurm.nodes([victim])[0]
        assert gone.down, (gone, daemons.running(victim), sandbox.current().nodes)
        # No signal reached the job between the drain and the removal.
        removed_at = datetime.strptime(lines[1].split()[0], "%Y-%m-%dT%H:%M:%S.%fZ").replace(
            tzinfo=timezone.utc
        )
        for term in re.findall(r"signal TERM at ([\d.]+)", log.read_text()):
            assert float(term) >= removed_at.timestamp() - 0.5
        # Removed: Slurm requeues the --requeue job, which restarts on the node left.
        info = wait_for(
            "the restart",
            lambda: (j := slurm.job(job)).state == "RUNNING" and j.restarts == 1 and j,
        )
        assert info.nodes == (P1,)
        attempts = wait_for(
            "the second attempt's line",
            lambda: log.read_text().count("attempt") == 2 and log.read_text(),
        )
        assert f"attempt restart=1 nodes={P1} n=1" in attempts
    finally:
        slurm.cancel(job)
        restore_node(sandbox, victim)
    assert slurm.nodes([victim])[0].usable


def test_preempt_in_the_background_brings_a_replacement_back(
    sandbox: Sandbox, slurm: CommandLineSlurm
) -> None:
    node = S1
    proc = slurmpre_cli(
        "sandbox",
        "preempt",
        node,
        "--window",
        "1",
        "--return-after",
        "1",
        "--background",
        check=True,
    )
    m = re.match(
        rf"preempting {S1} in the background \(pid (\d+)\); timeline in (\S+)", proc.stdout
    )
    assert m, proc.stdout
    state = sandbox.load()
    assert state is not None and int(m.group(1)) in state.helpers
    log = Path(m.group(2))
    text = wait_for(
        "the replacement", lambda: f"return {S1}" in log.read_text() and log.read_text()
    )
    kinds = [re.search(r"T\+[\d.]+s (\w+)", ln).group(1) for ln in text.splitlines()]  # type: ignore[union-attr]
    assert kinds == ["drain", "remove", "return"]
    assert slurm.nodes([node])[0].usable
    new_state = sandbox.load()
    assert new_state is not None
    pid = next(n["pid"] for n in new_state.nodes if n["name"] == node)
    assert pid and pid != next(n["pid"] for n in state.nodes if n["name"] == node)
    assert Path(f"/proc/{pid}").exists()


def test_once_empty_removes_a_node_without_jobs_at_once(
    sandbox: Sandbox, slurm: CommandLineSlurm
) -> None:
    """`--once-empty` does not wait out a 300 s window for a node no job runs on; what
    the node held in its node-local folder goes with it (its RAM, its disk)."""
    node = S1
    held = sandbox.config().local_dir(node) / "slurmpre-0" / "a-run" / "step-3"
    held.mkdir(parents=True, exist_ok=True)
    (held / "shard").write_bytes(b"x")
    try:
        proc = slurmpre_cli(
            "sandbox", "preempt", node, "--once-empty", "--return-after", "0", timeout=120
        )
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.strip().splitlines()
        offsets = [float(re.search(r"T\+(\d+\.\d)s", ln).group(1)) for ln in lines]  # type: ignore[union-attr]
        assert [re.search(r"s (\w+)", ln).group(1) for ln in lines] == ["drain", "remove", "return"]  # type: ignore[union-attr]
        assert offsets[1] < 10, lines
        assert "jobs it ended: none" in lines[1]
        assert sandbox.config().local_dir(node).is_dir()
        assert not (sandbox.config().local_dir(node) / "slurmpre-0").exists()
    finally:
        if not slurm.nodes([node])[0].usable:
            restore_node(sandbox, node)
    assert slurm.nodes([node])[0].usable
