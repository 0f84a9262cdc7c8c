"""Sweeps: specs grouped into arrays where they fit, and each task of the array's script
running its own command with its own environment (run in bash, a stub for srun)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from slurmpre.errors import SpecError, UsageError
from slurmpre.login import spec, sweep
from slurmpre.login.plan import Given, inputs_from
from slurmpre.login.render import render


def _spec(tmp_path: Path, **raw: object) -> spec.JobSpec:
    base = {"name": "lr", "command": "python train.py", "checkpoint_dir": str(tmp_path / "ck")}
    return spec.validate({**base, **raw})


def test_a_grid_is_every_combination_last_key_fastest() -> None:
    points = sweep.grid({"env.LR": ["0.1", "0.01"], "env.SEED": [1, 2]})
    assert [sweep.label(p) for p in points] == [
        "env.LR=0.1 env.SEED=1", "env.LR=0.1 env.SEED=2",
        "env.LR=0.01 env.SEED=1", "env.LR=0.01 env.SEED=2",
    ]  # fmt: skip
    with pytest.raises(SpecError, match=r"grid env\.LR: give a list"):
        sweep.grid({"env.LR": "0.1"})
    assert sweep.parse_axis("env.LR=0.1,0.01") == ("env.LR", ["0.1", "0.01"])
    assert sweep.parse_axis("nodes=1,2") == ("nodes", [1, 2])
    assert sweep.parse_axis('command=["a b", "c,d"]') == ("command", ["a b", "c,d"])
    with pytest.raises(SpecError, match="expected key=value1,value2"):
        sweep.parse_axis("nodes")


@pytest.mark.parametrize(
    ("axis", "exported"),
    [
        ("env.LR=1e-5,3e-4", ["1e-5", "3e-4"]),  # TOML's floats would be 1e-05 and 0.0003
        ("env.LR=[1e-5, 3e-4]", ["1e-5", "3e-4"]),
        ("env.STEPS=1_000,0x10,+1", ["1_000", "0x10", "+1"]),
        ("env.FLAG=true,False", ["true", "False"]),
        ('env.NAME="a b",c', ["a b", "c"]),  # a quoted string gives its text
        ('env.NAME=["a,b", "c"]', ["a,b", "c"]),
    ],
)
def test_a_variables_values_are_exported_as_written(axis: str, exported: list[str]) -> None:
    key, values = sweep.parse_axis(axis)
    assert values == exported
    points = sweep.grid({key: values})
    assert [sweep.apply({"env": {"A": "1"}}, p)["env"] for p in points] == [
        {"A": "1", key[4:]: v} for v in exported
    ]
    assert [sweep.label(p) for p in points] == [f"{key}={v}" for v in exported]


def test_specs_differing_in_command_env_and_name_are_one_array(tmp_path: Path) -> None:
    specs = [
        _spec(tmp_path, name="lr-a", command="python t.py --lr 1", env={"A": "1", "B": "x"}),
        _spec(tmp_path, name="lr-b", command="python t.py --lr 2", env={"A": "1", "B": "y"}),
        _spec(tmp_path, name="lr-c", command="python t.py --lr 3", env={"A": "1"}, nodes=2),
        _spec(tmp_path, name="lr-d", command="python t.py --lr 4", env={"A": "1", "B": "z"}),
    ]
    groups = sweep.group(specs, ["a", "b", "c", "d"], max_running=2)
    assert len(groups) == 2
    array, lone = groups
    assert array.spec.array == "0-2%2" and array.spec.name == "lr"
    assert array.spec.env == {"A": "1"}  # shared, once
    assert [(t.label, t.command[-1], dict(t.env)) for t in array.tasks] == [
        ("a", "1", {"B": "x"}), ("b", "2", {"B": "y"}), ("d", "4", {"B": "z"}),
    ]  # fmt: skip
    # the lone spec keeps its own name; an explicit folder shared by both would be
    # the same folder, so the later job is renamed only when names collide
    assert lone.tasks == () and lone.spec.name == "lr-c" and lone.spec.array is None


def test_two_jobs_of_one_name_never_share_a_derived_folder() -> None:
    specs = [
        spec.validate({"name": "s", "command": "a"}),
        spec.validate({"name": "s", "command": "b", "nodes": 2}),
    ]
    first, second = sweep.group(specs, ["a", "b"])
    assert (first.spec.name, second.spec.name) == ("s", "s-2")
    assert second.spec.checkpoint_dir.endswith("/checkpoints/s-2")
    assert second.spec.log_dir.endswith("/checkpoints/s-2/logs")


def test_a_spec_with_its_own_array_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="a sweep makes the array itself"):
        sweep.group([_spec(tmp_path, array="0-3")], ["x"])
    with pytest.raises(SpecError, match=r"max_running = 0"):
        sweep.group([_spec(tmp_path)], ["x"], max_running=0)


def _run_task(script: str, task: int, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """The batch script as array task ``task`` runs it, srun a stub that prints what it
    would run and the environment the sweep sets."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    srun = bin_dir / "srun"
    srun.write_text('#!/bin/bash\nprintf "argv=%s\\n" "$@"\necho "B=${B-unset} A=$A"\n')
    srun.chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "SLURM_ARRAY_TASK_ID": str(task),
        "SLURM_ARRAY_JOB_ID": "50",
        "SLURM_JOB_ID": str(51 + task),
        "SLURM_JOB_NUM_NODES": "1",
        "SLURM_JOB_NODELIST": "n1",
    }
    return subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_each_task_of_the_script_runs_its_own_command_and_environment(tmp_path: Path) -> None:
    specs = [
        _spec(tmp_path, command=["python", "t.py", "--lr", "1 2"], env={"A": "1", "B": "$HOME/x"}),
        _spec(tmp_path, command=["python", "t.py", "--name", "it's $$(id) $HOME"], env={"A": "1"}),
    ]
    (group,) = sweep.group(specs, ["first", "second\nlabel"])
    script = render(group.spec, None, group.tasks)
    first = _run_task(script, 0, tmp_path)
    assert first.returncode == 0, first.stderr
    argv = [line.removeprefix("argv=") for line in first.stdout.splitlines() if "argv=" in line]
    assert argv[-5:] == ["--", "python", "t.py", "--lr", "1 2"]
    assert f"B={tmp_path}/x A=1" in first.stdout
    second = _run_task(script, 1, tmp_path)
    argv = [line.removeprefix("argv=") for line in second.stdout.splitlines() if "argv=" in line]
    # Nothing of it ran, nor expanded: the wrapper expands it on the node.
    assert argv[-3:] == ["t.py", "--name", "it's $$(id) $HOME"]
    assert "B=unset A=1" in second.stdout
    stray = _run_task(script, 2, tmp_path)
    assert stray.returncode == 1
    assert "array task 2 is none of this sweep's 2" in stray.stdout + stray.stderr


def test_a_template_without_the_default_launch_cannot_run_a_sweep(tmp_path: Path) -> None:
    own = tmp_path / "own.sbatch.j2"
    own.write_text("#!/bin/bash\n{{ launch | join(' ') }}\n")
    specs = [_spec(tmp_path, template=str(own)), _spec(tmp_path, template=str(own), command="b")]
    (group,) = sweep.group(specs, ["a", "b"])

    with pytest.raises(UsageError, match="a sweep needs the default environment and launch blocks"):
        render(group.spec, None, group.tasks)


def test_plan_without_a_restart_measured_takes_slurms_requeue_floor(tmp_path: Path) -> None:
    given = Given(checkpoint_s=30, mtbf_s=7200)
    found = inputs_from([], given, requeue_floor=lambda: 121)
    assert found.restart_s == 121.0
    assert any("requeue floor" in s for s in found.sources)
    mine = inputs_from([], Given(checkpoint_s=30, mtbf_s=7200, restart_s=9), lambda: 121)
    assert mine.restart_s == 9
    with pytest.raises(UsageError, match="give --restart-seconds"):
        inputs_from([], given, requeue_floor=lambda: None)


# -- a sweep is submitted whole or not at all (#35) --------------------------------------
class Queue:
    """A Slurm that keeps what was queued, checks with --test-only, and can refuse the
    ``refuse``-th real submission (a limit only reached once jobs are queued)."""

    def __init__(self, refuse: int | None = None) -> None:
        self.queued: list[str] = []
        self.tested = 0
        self.cancelled: list[str] = []
        self.refuse = refuse

    def config(self) -> dict[str, str]:
        return {}  # 22.05's: no expedited requeue

    def submit(self, script: str, *, args: object = (), test_only: bool = False) -> str:
        from slurmpre.errors import SlurmError

        if test_only:
            self.tested += 1
            return "sbatch: Job 0 to start at once"
        if self.refuse is not None and len(self.queued) + 1 == self.refuse:
            raise SlurmError("sbatch: error: QOSMaxSubmitJobPerUserLimit")
        self.queued.append(script)
        return str(200 + len(self.queued))

    def cancel(self, job_id: str) -> None:
        self.cancelled.append(job_id)

    def job(self, job_id: str) -> object:
        from slurmpre.errors import JobNotFound

        raise JobNotFound(f"Slurm knows no job {job_id}")


def sweep_of_two(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[sweep.Group]:
    import sys

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    base = {"command": "python train.py", "python": sys.executable}
    specs = [
        spec.validate({**base, "name": "a", "checkpoint_dir": str(tmp_path / "a")}),
        spec.validate({**base, "name": "b", "checkpoint_dir": str(tmp_path / "b"), "nodes": 2}),
    ]
    return sweep.group(specs, ["a", "b"])


def test_a_sweep_refused_in_its_second_job_queues_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It queued its first group of tasks and then refused the second: half a sweep."""
    from slurmpre.login.submit import check, submit

    from tests.test_resuming import finished_run

    groups = sweep_of_two(tmp_path, monkeypatch)
    finished_run(tmp_path / "b", name="b")  # b's folder: a run that finished its training
    slurm = Queue()
    with pytest.raises(UsageError, match="finished its training"):
        sweep.submit_groups(groups, slurm, submit_one=submit, check_one=check)
    assert slurm.queued == [] and not (tmp_path / "a" / ".slurmpre").exists()


def test_a_sweep_that_slurm_refuses_halfway_is_cancelled_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from slurmpre.errors import SlurmError
    from slurmpre.login.submit import check, submit

    slurm = Queue(refuse=2)
    with pytest.raises(SlurmError) as err:
        sweep.submit_groups(
            sweep_of_two(tmp_path, monkeypatch), slurm, submit_one=submit, check_one=check
        )
    assert slurm.tested == 2 and len(slurm.queued) == 1
    assert slurm.cancelled == ["201"]
    assert "this sweep's jobs already queued were cancelled: 201" in str(err.value)


@pytest.mark.parametrize("value", [True, "2", 1.5, 0])
def test_max_running_is_a_whole_number_of_tasks(tmp_path: Path, value: object) -> None:
    specs = [_spec(tmp_path, name="a"), _spec(tmp_path, name="b")]
    with pytest.raises(SpecError, match=r"max_running = .*: a whole number of tasks"):
        sweep.group(specs, ["a", "b"], max_running=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("axes", "message"),
    [({"env.LR": [None, "0.1"]}, "None is not a value"),
     ({"env.LR": [["a", None]]}, "None is not a value"),
     ({"env.LR": [object()]}, "is not a value a spec holds"),
     ({"a": list(range(3000)), "b": list(range(3000))}, "3000 x 3000 points: more than"),
     ({}, "give at least one key"), ({1: [1]}, "must be a spec key")],
)  # fmt: skip
def test_a_grid_of_what_no_spec_holds_or_of_millions_is_refused_before_it_is_made(
    axes: dict[object, list[object]], message: str
) -> None:
    with pytest.raises(SpecError, match=message):
        sweep.grid(axes)  # type: ignore[arg-type]
