from pathlib import Path

import pytest
from slurmpre.errors import UsageError
from slurmpre.job.start.env import read_job_env
from slurmpre.job.start.rendezvous import (
    PORT_BASE,
    PORT_SPAN,
    Rendezvous,
    accelerate_argv,
    accelerate_config,
    port_for,
    torchrun_argv,
)

RDZV = Rendezvous("127.0.0.1", 20042, "42-1", nnodes=2, nproc_per_node=4, node_rank=1)
OPTIONS = [
    "--nnodes=2",
    "--nproc-per-node=4",
    "--node-rank=1",
    "--rdzv-backend=c10d",
    "--rdzv-endpoint=127.0.0.1:20042",
    "--rdzv-id=42-1",
    "--rdzv-conf=is_host=false",
    "--max-restarts=0",
]


def test_port_is_derived_from_the_job_id_outside_the_ephemeral_range() -> None:
    assert port_for("42") == port_for("42") == PORT_BASE + 42
    assert all(
        PORT_BASE <= port_for(str(j)) < PORT_BASE + PORT_SPAN < 32768 for j in (0, 9999, 10**9 + 7)
    )


def test_python_script_runs_under_that_python() -> None:
    argv = torchrun_argv(["/venv/bin/python3", "train.py", "--lr", "1"], RDZV)
    assert argv == [
        "/venv/bin/python3",
        "-m",
        "torch.distributed.run",
        *OPTIONS,
        "--",
        "train.py",
        "--lr",
        "1",
    ]


def test_python_module_keeps_dash_m() -> None:
    argv = torchrun_argv(["python", "-m", "pkg.train", "x"], RDZV)
    assert argv[-4:] == ["-m", "--", "pkg.train", "x"]


def test_the_scripts_own_options_never_reach_torchruns_parser() -> None:
    """torchrun's parser abbreviates: a script's --log (a prefix of --log-dir and
    --logs-specs) ended the job with "ambiguous option" before the "--" was there."""
    import subprocess
    import sys

    argv = torchrun_argv([sys.executable, "-c", "pass"], RDZV)
    assert argv[argv.index("--") - 1] == "--max-restarts=0"
    parsed = subprocess.run(
        [sys.executable, "-c", "import sys; from torch.distributed.run import parse_args; "
         "a = parse_args(sys.argv[1:]); print(a.training_script, a.training_script_args)",
         "--standalone", "--", "train.py", "--log", "x", "--role", "y"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert parsed.stdout.strip() == "train.py ['--log', 'x', '--role', 'y']", parsed.stderr


def test_only_node_0_hosts_the_store() -> None:
    host = Rendezvous("10.0.0.1", 20042, "42-0", nnodes=2, nproc_per_node=1, node_rank=0)
    assert "--rdzv-conf=is_host=true" in torchrun_argv(["python", "t.py"], host)
    assert "--rdzv-conf=is_host=false" in torchrun_argv(["python", "t.py"], RDZV)


def test_other_programs_run_without_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "torchrun"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert torchrun_argv(["./serve", "a"], RDZV) == [
        str(fake),
        *OPTIONS,
        "--no-python",
        "--",
        "./serve",
        "a",
    ]
    assert torchrun_argv(["train.py"], RDZV) == [str(fake), *OPTIONS, "--", "train.py"]


def test_python_without_script_is_refused() -> None:
    with pytest.raises(UsageError, match="names no script"):
        torchrun_argv(["python"], RDZV)


def test_a_step_after_an_in_place_restart_meets_on_another_port() -> None:
    first, second = port_for("4242"), port_for("4242", in_place=1)
    assert first != second
    assert all(20000 <= p < 30000 for p in (first, second, port_for("4242", in_place=9)))


def test_clusters_whose_nodes_share_a_host_meet_on_ports_apart() -> None:
    """Sandboxes side by side: job 7 of one and job 7 of another run on the same host
    (SLURMPRE_PORT_OFFSET, which each sandbox sets 1000 apart, and jobs read). Each keeps
    to its band of 1000 ports, in-place restarts included."""
    bands = [
        {port_for(str(job), k, offset=1000 * (n + 1)) for job in range(1, 400) for k in range(4)}
        for n in range(10)
    ]
    assert sum(map(len, bands)) == len(set().union(*bands))  # no port in two bands
    assert all(20000 <= p < 30000 for band in bands for p in band)
    assert port_for("7") == port_for("7", offset=0) == 20007  # a real cluster's: unchanged
    step = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n1", "SLURMD_NODENAME": "n1"}
    assert read_job_env({**step, "SLURMPRE_PORT_OFFSET": "3000"}).port_offset == 3000
    assert read_job_env(step).port_offset == 0


def test_accelerate_gets_the_allocations_machines_ranks_and_rendezvous(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path)}  # no Accelerate config: more than one process is DDP
    argv = accelerate_argv(["/venv/bin/python3", "train.py", "--lr", "1"], RDZV, env)
    assert argv == [
        "/venv/bin/python3",
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_machines=2",
        "--machine_rank=1",
        "--num_processes=8",
        "--main_process_ip=127.0.0.1",
        "--main_process_port=20042",
        "--max_restarts=0",
        "--rdzv_backend=c10d",
        "--rdzv_conf=is_host=false",
        "train.py",
        "--lr",
        "1",
    ]
    assert accelerate_argv(["python", "-m", "pkg.train", "x"], RDZV, env)[-4:] == [
        "--rdzv_conf=is_host=false",
        "--module",
        "pkg.train",
        "x",
    ]


def test_the_users_accelerate_config_decides_how_processes_run(tmp_path: Path) -> None:
    """FSDP or DeepSpeed in `accelerate config`: slurmpre adds no --multi_gpu over it."""
    config = tmp_path / "hf" / "accelerate" / "default_config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text("distributed_type: FSDP\n")
    env = {"HOME": str(tmp_path), "HF_HOME": str(tmp_path / "hf")}
    assert accelerate_config(env) == config
    argv = accelerate_argv(["python", "train.py"], RDZV, env)
    assert "--multi_gpu" not in argv and "--num_machines=2" in argv


def test_one_process_in_all_is_launched_without_multi_gpu_or_rendezvous(tmp_path: Path) -> None:
    one = Rendezvous("127.0.0.1", 20042, "42-1", nnodes=1, nproc_per_node=1, node_rank=0)
    argv = accelerate_argv(["python", "train.py"], one, {"HOME": str(tmp_path)})
    assert "--multi_gpu" not in argv and not any(a.startswith("--rdzv") for a in argv)
    assert "--num_processes=1" in argv


def test_accelerates_own_parser_reads_every_option(tmp_path: Path) -> None:
    launch = pytest.importorskip("accelerate.commands.launch")
    argv = accelerate_argv(["python", "train.py", "--lr", "1"], RDZV, {"HOME": str(tmp_path)})
    args = launch.launch_command_parser().parse_args(argv[3:])
    assert (args.num_machines, args.machine_rank, args.num_processes) == (2, 1, 8)
    assert (args.main_process_ip, args.main_process_port) == ("127.0.0.1", 20042)
    assert (args.rdzv_backend, args.rdzv_conf, args.max_restarts) == ("c10d", "is_host=false", 0)
    assert args.multi_gpu and args.training_script == "train.py"
    assert args.training_script_args == ["--lr", "1"]


def test_the_specs_accelerate_config_is_its_config_file_on_every_node(tmp_path: Path) -> None:
    """accelerate_config: --config_file on the command line, the allocation's topology
    after it (accelerate's flags win over the file's), no --multi_gpu over it, even
    where a default config exists too."""
    default = tmp_path / "hf" / "accelerate" / "default_config.yaml"
    default.parent.mkdir(parents=True)
    default.write_text("distributed_type: FSDP\n")
    env = {"HOME": str(tmp_path), "HF_HOME": str(tmp_path / "hf")}
    argv = accelerate_argv(["python", "train.py"], RDZV, env, "/shared/fsdp.yaml")
    assert argv[3:5] == ["--config_file", "/shared/fsdp.yaml"]
    assert "--multi_gpu" not in argv and "--num_machines=2" in argv
    launch = pytest.importorskip("accelerate.commands.launch")
    args = launch.launch_command_parser().parse_args(argv[3:])
    assert args.config_file == "/shared/fsdp.yaml" and args.num_processes == 8
