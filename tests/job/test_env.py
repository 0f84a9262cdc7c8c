import pytest
from slurmpre.errors import JobEnvironmentError
from slurmpre.job.start.env import read_job_env

# As srun sets it on the second node of a 2-node job (captured on the sandbox, trimmed).
STEP_ENV = {
    "SLURM_JOB_ID": "42",
    "SLURM_JOB_NODELIST": "gpu-preemptible-dp-[1-2]",
    "SLURM_NODEID": "1",
    "SLURMD_NODENAME": "gpu-preemptible-dp-2",
    "SLURM_GPUS_ON_NODE": "2",
    "SLURM_RESTART_COUNT": "1",
}


def test_reads_the_step_environment() -> None:
    job = read_job_env(STEP_ENV)
    assert job.job_id == "42" and job.tag == "42"
    assert job.restart_count == 1 and job.restarted
    assert job.nodes == ("gpu-preemptible-dp-1", "gpu-preemptible-dp-2")
    assert job.num_nodes == 2
    assert job.node_id == 1 and not job.is_first_node
    assert job.gpus_on_node == 2


def test_first_run_has_no_restart_count() -> None:
    env = {k: v for k, v in STEP_ENV.items() if k != "SLURM_RESTART_COUNT"}
    job = read_job_env(env)
    assert job.restart_count == 0 and not job.restarted


def test_array_task_tag() -> None:
    job = read_job_env({**STEP_ENV, "SLURM_ARRAY_JOB_ID": "40", "SLURM_ARRAY_TASK_ID": "3"})
    assert job.tag == "40_3"


def test_gpus_fall_back_to_visible_devices() -> None:
    env = {k: v for k, v in STEP_ENV.items() if k != "SLURM_GPUS_ON_NODE"}
    assert read_job_env({**env, "CUDA_VISIBLE_DEVICES": "0,1,2"}).gpus_on_node == 3
    assert read_job_env(env).gpus_on_node == 0


def test_outside_a_job_is_a_clear_error() -> None:
    with pytest.raises(JobEnvironmentError, match=r"not inside a Slurm job \(SLURM_JOB_ID"):
        read_job_env({"PATH": "/bin"})


def test_bad_number_names_the_variable() -> None:
    with pytest.raises(JobEnvironmentError, match="SLURM_RESTART_COUNT='x' is not a number"):
        read_job_env({**STEP_ENV, "SLURM_RESTART_COUNT": "x"})


def _child_env(
    launcher: str, extra: dict[str, str] | None = None, step: dict[str, str] | None = None
) -> dict[str, str]:
    from pathlib import Path

    from slurmpre.folder.ledger import Choice
    from slurmpre.job.start.args import parse_args
    from slurmpre.job.start.launch import child_env

    opts = parse_args(["--launcher", launcher, "--checkpoint-dir", "/c", "--", "python", "t.py"])
    choice = Choice("42", 1, None, None, ("gpu-preemptible-dp-1", "gpu-preemptible-dp-2"),
                    2, None, "10.0.0.7:20042", 1.0)  # fmt: skip
    step = {**STEP_ENV, **(step or {})}
    return child_env({**step, **(extra or {})}, opts, read_job_env(step), Path("/c"), choice)


def test_a_plain_command_gets_what_torch_distributed_env_init_needs() -> None:
    env = _child_env("plain")
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("10.0.0.7", "20042")
    assert (env["NODE_RANK"], env["RANK"], env["WORLD_SIZE"]) == ("1", "1", "2")
    assert (env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"]) == ("0", "1")
    # A value the job set itself wins.
    assert _child_env("plain", {"MASTER_PORT": "29500"})["MASTER_PORT"] == "29500"


def test_under_torchrun_torchrun_sets_them_per_worker() -> None:
    env = _child_env("torchrun")
    assert not {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"} & set(env)


def test_accelerate_on_a_node_without_gpus_is_told_to_use_the_cpu() -> None:
    """Else each process counts itself alone (DistributedType.NO) in a world of many."""
    no_gpu = {"SLURM_GPUS_ON_NODE": "0"}
    assert _child_env("accelerate", step=no_gpu)["ACCELERATE_USE_CPU"] == "true"
    assert "ACCELERATE_USE_CPU" not in _child_env("accelerate")  # this node has 2
    mine = _child_env("accelerate", {"ACCELERATE_USE_CPU": "false"}, step=no_gpu)
    assert mine["ACCELERATE_USE_CPU"] == "false"  # what the job set wins
    assert "ACCELERATE_USE_CPU" not in _child_env("torchrun", step=no_gpu)


def test_the_runs_restart_count_goes_on_across_its_jobs() -> None:
    """A successor's training counts the restarts of the jobs before it (its own
    SLURM_RESTART_COUNT names its records, and starts again at 0)."""
    from slurmpre import api
    from slurmpre.job.start.env import read_job_env

    env = {"SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "n1", "SLURM_NODEID": "0",
           "SLURM_RESTART_COUNT": "1", "SLURMPRE_EARLIER_RESTARTS": "2"}  # fmt: skip
    job = read_job_env(env)
    assert (job.restart_count, job.run_restarts) == (1, 3)
    child = {"SLURMPRE_RESTART_COUNT": "1", "SLURMPRE_RESTARTS": "3"}
    assert api.restart_count(child) == 3 and api.attempt.own_attempt(child) == 1
    assert api.restart_count({"SLURM_RESTART_COUNT": "2"}) == 2  # outside a chain, as before


def test_what_every_training_finds_set_is_what_the_wrapper_and_script_set() -> None:
    """`environment.ALWAYS` (what a command's $NAME may name without a warning at submit):
    `Training`'s every variable, and the batch script's exports."""
    from slurmpre import environment

    training = _child_env("plain")
    script = {environment.JOB_NAME, environment.LOG_DIR}
    assert {k for k in training if k.startswith("SLURMPRE_")} | script >= environment.ALWAYS
    assert {k for k in training if k.startswith("SLURMPRE_")} <= environment.ALWAYS


@pytest.mark.parametrize(
    ("step", "tag", "attempt"),
    [
        ({}, "42", "1"),  # a requeue: Slurm's second run of the job
        ({"SLURM_RESTART_COUNT": "2", "SLURMPRE_IN_PLACE": "1"}, "42", "2.1"),  # in place
        ({"SLURM_RESTART_COUNT": "0", "SLURMPRE_IN_PLACE": "3"}, "42", "0.3"),
        ({"SLURM_RESTART_COUNT": ""}, "42", "0"),  # the first run: Slurm leaves it unset
        ({"SLURM_RESTART_COUNT": "0", "SLURMPRE_EARLIER_RESTARTS": "4"}, "42", "0"),  # successor
        ({"SLURM_ARRAY_JOB_ID": "40", "SLURM_ARRAY_TASK_ID": "3"}, "40_3", "1"),  # array task
    ],
)
def test_the_training_finds_the_control_files_its_wrapper_names(
    step: dict[str, str], tag: str, attempt: str
) -> None:
    """The script's `own_files`, from the training's environment, names the very files the
    wrapper's watcher writes and reads for this attempt (`JobEnv.files`)."""
    from pathlib import Path

    from slurmpre.api.attempt import own_files
    from slurmpre.folder.layout import AttemptFiles, FolderLayout

    wrapper = read_job_env({**STEP_ENV, **step}).files(Path("/c"))
    assert wrapper == AttemptFiles(FolderLayout(Path("/c")), tag, attempt)
    assert own_files(_child_env("torchrun", step=step)) == wrapper
    assert wrapper.notice == Path(f"/c/.slurmpre/notice-{tag}-{attempt}.json")


def test_outside_a_slurmpre_job_there_are_no_control_files() -> None:
    from slurmpre.api.attempt import own_files

    assert own_files({}) is None
    assert own_files({"SLURMPRE_CHECKPOINT_DIR": "/c", "SLURMPRE_JOB_TAG": ""}) is None
    assert own_files({"SLURMPRE_CHECKPOINT_DIR": "", "SLURMPRE_JOB_TAG": "42"}) is None
