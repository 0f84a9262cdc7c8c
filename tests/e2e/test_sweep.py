"""End to end (#24 items 1, 3, 4): a sweep of three specs runs as one Slurm array, and
``123`` (every task) and ``123_1`` (one) work in wait, logs, status and cancel; the
lines of a two-node job carry their node and ``logs --node`` picks one."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import slurmpre
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.slurm.client import CommandLineSlurm

from tests.conftest import slurmpre_cli, wait_for, wait_preemptible_idle

pytestmark = [pytest.mark.sandbox, pytest.mark.e2e]

SAY = "import os, sys; print('task says', os.environ['COLOR'], sys.argv[1], flush=True)"


def spec(folder: Path, name: str, lines: list[str]) -> Path:
    path = folder / f"{name}.toml"
    path.write_text("\n".join([f'name = "{name}"', 'launcher = "plain"', *lines]) + "\n")
    return path


def test_a_sweep_of_three_specs_is_one_array_and_each_command_takes_it_or_a_task(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    slurm = CommandLineSlurm()
    wait_preemptible_idle(slurm)
    folder = json.dumps(str(tmp_path / "trio"))
    files = [
        spec(
            tmp_path,
            f"trio-{color}",
            [
                f"command = {json.dumps([sys.executable, '-c', SAY, arg])}",
                f'env = {{ COLOR = "{color}", SHARED = "yes" }}',
                f"checkpoint_dir = {folder}",
                "poll_interval = 1",
            ],
        )
        for color, arg in (("red", "one"), ("green", "two"), ("blue", "three"))
    ]
    queued = slurmpre_cli("sweep", *map(str, files), check=True)
    (array,) = queued.stdout.split()  # one job: the array
    assert f"array job {array} (trio): 3 tasks" in queued.stderr
    info = slurm.job(f"{array}_0")
    assert info.raw.get("ArrayJobId") == array
    try:
        done = slurmpre_cli("wait", array, "--timeout", "300")
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"array job {array}: all 3 tasks completed"

        logs = slurmpre_cli("logs", array, check=True).stdout
        for n, (color, arg) in enumerate((("red", "one"), ("green", "two"), ("blue", "three"))):
            assert f"==> {array}_{n} <==" in logs
            assert f"task says {color} {arg}" in logs
        one = slurmpre_cli("logs", f"{array}_1", check=True).stdout
        assert "task says green two" in one and "red" not in one and "blue" not in one

        status = json.loads(slurmpre_cli("status", array, "--json", check=True).stdout)
        assert status["schema"] == "slurmpre/array-status/1"
        assert [t["label"] for t in status["tasks"]] == ["trio-red", "trio-green", "trio-blue"]
        assert [t["job"] for t in status["tasks"]] == [f"{array}_{n}" for n in range(3)]
        assert all([a["ended"] for a in t["attempts"]] == ["completed"] for t in status["tasks"])
        text = slurmpre_cli("status", f"{array}_2", check=True).stdout
        assert text.startswith(f"job {array}_2 (trio): COMPLETED")
        assert str(tmp_path / "trio" / "task-2") in text
        mine = json.loads(slurmpre_cli("status", "--json", check=True).stdout)["jobs"]
        assert {f"{array}_{n}" for n in range(3)} <= {r["job"] for r in mine}

        # The Python API: a grid over one spec is one array too; cancel by the array's id.
        base = spec(tmp_path, "slow", [
            f"command = {json.dumps([sys.executable, '-c', 'import time; time.sleep(600)'])}",
            f"checkpoint_dir = {json.dumps(str(tmp_path / 'slow'))}",
        ])  # fmt: skip
        (job,) = slurmpre.sweep(base, grid={"env.SEED": ["1", "2"]})
        assert job.array == "0-1" and [t.id for t in job.tasks()] == [f"{job.id}_0", f"{job.id}_1"]
        wait_for(
            "both tasks to run",
            lambda: all(t.state() == "RUNNING" for t in job.tasks()),
            timeout=180,
        )
        cancelled = slurmpre_cli("cancel", job.id, check=True).stdout
        assert f"{job.id}_0: cancelled job {job.id}_0" in cancelled
        assert f"{job.id}_1: cancelled job {job.id}_1" in cancelled
        with pytest.raises(slurmpre.JobFailed, match=r"2 of 2 tasks .* did not complete"):
            job.wait(timeout=120)
    finally:
        slurm.cancel(array)
        for leftover in slurm.jobs(user=info.user):
            if leftover.name == "slow":
                slurm.cancel(leftover.job_id)


def test_each_line_of_a_two_node_job_names_its_node_and_logs_picks_one(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    slurm = CommandLineSlurm()
    wait_preemptible_idle(slurm)
    code = "import os; print('hello from', os.environ['SLURMD_NODENAME'], flush=True)"
    path = spec(tmp_path, "pair", [
        f"command = {json.dumps([sys.executable, '-c', code])}",
        f"checkpoint_dir = {json.dumps(str(tmp_path / 'pair'))}",
        "nodes = 2",
        "poll_interval = 1",
    ])  # fmt: skip
    job = slurmpre.submit(path)
    try:
        assert job.wait(timeout=300) == "COMPLETED"
        nodes = slurm.job(job.id).nodes
        everything = slurmpre_cli("logs", job.id, check=True).stdout
        for n, node in enumerate(nodes):
            assert f"{n}: hello from {node}" in everything
        second = slurmpre_cli("logs", job.id, "--node", "1", check=True).stdout
        assert f"1: hello from {nodes[1]}" in second
        assert f"hello from {nodes[0]}" not in second
        assert not any(line.startswith("0: ") for line in second.splitlines())
        doc = json.loads(slurmpre_cli("logs", job.id, "--node", "0", "--json", check=True).stdout)
        assert doc["schema"] == "slurmpre/logs/1"
        assert f"0: hello from {nodes[0]}" in doc["logs"][0]["text"]
        assert f"hello from {nodes[1]}" not in doc["logs"][0]["text"]
    finally:
        slurm.cancel(job.id)
