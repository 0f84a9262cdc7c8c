"""Parsers over output captured from the real sandbox on each supported Slurm release
(tests/data/slurm-<release>/, written by tests/data/capture.py): every test that reads
a capture runs once per release."""

from pathlib import Path

import pytest
from slurmpre.errors import SlurmError
from slurmpre.slurm.parse import (
    format_version,
    parse_config,
    parse_jobs,
    parse_nodes,
    parse_record,
    parse_resize_env,
    parse_submit,
    parse_version,
    requeue_floor,
    split_state,
)


def test_record_keeps_values_with_spaces() -> None:
    rec = parse_record("NodeName=n1 OS=Linux 6.1 #1 SMP  RealMemory=10 Reason=pre empted [root@t]")
    assert rec["OS"] == "Linux 6.1 #1 SMP"
    assert rec["RealMemory"] == "10"
    assert rec["Reason"] == "pre empted [root@t]"


def test_nodes_with_one_draining(captured: Path) -> None:
    nodes = {n.name: n for n in parse_nodes((captured / "nodes-one-draining.txt").read_text())}
    assert set(nodes) == {"gpu-preemptible-dp-1", "gpu-preemptible-dp-2", "gpu-dp-1"}
    drained = nodes["gpu-preemptible-dp-1"]
    assert drained.draining and not drained.down and not drained.usable
    assert drained.reason == "preempted [by test]"
    assert drained.features == ("preemptible",)
    assert not nodes["gpu-preemptible-dp-2"].draining
    assert nodes["gpu-dp-1"].features == ("standard",)
    assert nodes["gpu-dp-1"].usable


def test_node_down_and_drained(captured: Path) -> None:
    (node,) = parse_nodes((captured / "node-down-drain.txt").read_text())
    assert node.state == "DOWN" and "DRAIN" in node.flags
    assert node.down and node.draining
    assert node.reason == "gone"
    assert node.address == "127.0.0.1"


@pytest.mark.parametrize(
    ("text", "base", "flags"),
    [
        ("MIXED+DRAIN", "MIXED", {"DRAIN"}),
        ("IDLE", "IDLE", set()),
        ("drained*", "DRAINED", {"NOT_RESPONDING"}),
        ("DOWN+DRAIN+NOT_RESPONDING", "DOWN", {"DRAIN", "NOT_RESPONDING"}),
    ],
)
def test_split_state(text: str, base: str, flags: set[str]) -> None:
    assert split_state(text) == (base, frozenset(flags))


def test_job_running_on_an_elastic_range(captured: Path) -> None:
    (job,) = parse_jobs((captured / "job-running-elastic.txt").read_text())
    assert job.name == "name with space"
    assert job.state == "RUNNING"
    assert job.requeue and job.restarts == 0
    assert job.nodes == ("gpu-preemptible-dp-1", "gpu-preemptible-dp-2")
    assert job.features == "preemptible"
    assert job.stdout is not None and job.stdout.endswith("out 2.txt")
    assert not job.finished


def test_job_after_requeue_counts_restarts(captured: Path) -> None:
    (job,) = parse_jobs((captured / "job-pending-requeued.txt").read_text())
    assert job.restarts == 1 and job.requeue


def test_job_cancelled_is_finished(captured: Path) -> None:
    (job,) = parse_jobs((captured / "job-cancelled.txt").read_text())
    assert job.state == "CANCELLED" and job.finished


def test_versions(captured: Path) -> None:
    major, minor = (int(x) for x in captured.name.removeprefix("slurm-").split("."))
    for capture in ("sinfo-version.txt", "slurmd-version.txt"):
        assert parse_version((captured / capture).read_text())[:2] == (major, minor)
    assert parse_version("slurm 24.11.5") == (24, 11, 5)
    assert format_version((22, 5, 8)) == "22.05.8"
    with pytest.raises(SlurmError):
        parse_version("no version here")


def test_submit() -> None:
    assert parse_submit("123\n") == "123"
    assert parse_submit("77;sandbox\n") == "77"
    with pytest.raises(SlurmError, match="no job id"):
        parse_submit("sbatch: error: Batch job submission failed\n")


def test_the_requeue_floor_is_the_sandboxs_cred_expire_plus_one(captured: Path) -> None:
    config = parse_config((captured / "config.txt").read_text())
    assert config["AuthInfo"] == "cred_expire=5"  # the sandbox's tuned timings
    assert config["KillWait"] == "5 sec"
    assert requeue_floor(config) == 6


@pytest.mark.parametrize(
    ("auth", "floor"),
    [("(null)", 121), ("", 121), ("cred_expire=30", 31), ("socket=/x,cred_expire=600", 601)],
)
def test_requeue_floor_defaults_to_slurms_120_s(auth: str, floor: int) -> None:
    assert requeue_floor({"AuthInfo": auth} if auth else {}) == floor


def test_the_resize_script_of_an_in_place_restart(captured: Path) -> None:
    env = parse_resize_env((captured / "resize.sh").read_text())
    assert env["SLURM_JOB_NODELIST"] == env["SLURM_NODELIST"] == "gpu-preemptible-dp-1"
    assert env["SLURM_JOB_NUM_NODES"] == env["SLURM_NNODES"] == "1"
    # The old allocation's task counts are gone: a new srun takes its own.
    assert env["SLURM_NTASKS"] is None and env["SLURM_TASKS_PER_NODE"] is None
    (job,) = parse_jobs((captured / "job-shrunk.txt").read_text())
    assert job.nodes == (job.batch_host,) and job.state == "RUNNING"


def test_a_resize_script_without_a_node_list_is_an_error() -> None:
    with pytest.raises(SlurmError, match="names no node list"):
        parse_resize_env("unset SLURM_NTASKS\n")
