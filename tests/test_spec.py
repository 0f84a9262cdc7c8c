"""Job specs: every bad value gets one line naming the key, and exit code 2."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from slurmpre.errors import UsageError
from slurmpre.lines import sent_to
from slurmpre.login.spec import JobSpec, Launcher, SpecError, load, parse_sets, validate
from slurmpre.noderange import NodeRange

from tests.conftest import slurmpre_cli

BASE = {"name": "job", "command": ["python", "train.py"]}


def spec(**kw: object) -> JobSpec:
    return validate({**BASE, **kw}, user="alice", python="/opt/venv/bin/python")


def test_defaults_target_preemptible_nodes_with_requeue() -> None:
    s = spec()
    assert s.constraint == "preemptible"
    assert s.requeue is True
    assert s.nodes == NodeRange(1, 1)
    assert s.launcher is Launcher.TORCHRUN
    assert s.checkpoint_dir == "/home/alice/checkpoints/job"
    assert s.log_dir == "/home/alice/checkpoints/job/logs"
    assert s.python == "/opt/venv/bin/python"


def test_values_are_normalised() -> None:
    s = spec(
        nodes="2-4",
        command="python train.py --tag 'a b'",
        env={"SEED": 1},
        setup="module load cuda\nsource venv/bin/activate",
        extra_sbatch=["#SBATCH --mail-type=END", "--exclusive"],
        constraint="standard",
        requeue=False,
        nproc_per_node="auto",
    )
    assert s.nodes == NodeRange(2, 4) and str(s.nodes) == "2-4" and s.nodes.elastic
    assert s.command == ("python", "train.py", "--tag", "a b")
    assert s.env == {"SEED": "1"}
    assert s.setup == ("module load cuda", "source venv/bin/activate")
    assert s.extra_sbatch == ("--mail-type=END", "--exclusive")
    assert (s.constraint, s.requeue, s.nproc_per_node) == ("standard", False, None)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"nodes": "4-2"}, "nodes = '4-2': the range's minimum 4 is larger than its maximum 2"),
        ({"nodes": 0}, "nodes = 0: needs at least 1 node"),
        ({"nodes": "0-2"}, "nodes = '0-2': needs at least 1 node"),
        ({"nodes": "many"}, "nodes = 'many': must be a count such as 4 or a range such as \"2-4\""),
        ({"time": "4 hours"}, "time = '4 hours': must be a Slurm time such as 90, 4:00:00 or"),
        ({"time": "1:2:3:4"}, "time = '1:2:3:4': must be a Slurm time"),
        ({"gpus_per_node": -1}, "gpus_per_node = -1: must be 0 or more"),
        ({"gpus_per_node": "eight"}, "gpus_per_node = 'eight': must be a whole number"),
        ({"gpus_per_node": True}, "gpus_per_node = true: must be a whole number"),
        ({"nproc_per_node": 0}, "nproc_per_node = 0: must be 1 or more"),
        ({"mem": "lots"}, "mem = 'lots': must be a size such as 64G or 512M"),
        ({"name": "a\nb"}, 'name = "a\\nb": must be one line without control characters'),
        ({"name": "a/b"}, "name = 'a/b': names a folder of checkpoints: no '/', '.' or '..'"),
        ({"name": ""}, "name = '': must not be empty"),
        ({"nodez": 2}, "unknown key 'nodez' (did you mean 'nodes'?)"),
        ({"frobnicate": 2}, "unknown key 'frobnicate'"),
        (
            {"launcher": "mpirun"},
            "launcher = 'mpirun': must be 'torchrun', 'accelerate' or 'plain'",
        ),
        ({"requeue": "maybe"}, "requeue = 'maybe': must be true or false"),
        ({"array": "1-x"}, "array = '1-x': must be a Slurm array range such as 0-99 or 1,3,5-7%4"),
        ({"partition": "a b"}, "partition = 'a b': must be one word of letters, digits, . _ -"),
        ({"constraint": "a;b"}, "constraint = 'a;b': must be a Slurm feature expression"),
        ({"checkpoint_dir": "ckpt"}, "checkpoint_dir = 'ckpt': must be an absolute path"),
        ({"env": {"1BAD": "x"}}, "env key '1BAD' is not a valid environment variable name"),
        ({"env": {"P_K\n": "x"}}, "env key 'P_K\\n' is not a valid environment variable name"),
        ({"env": {"OK": ["x"]}}, "env.OK = ['x']: must be a string or a number"),
        ({"env": {"_": ""}}, "env key '_' is bash's own: the batch script cannot pass it on"),
        ({"env": {"IFS": ":"}}, "env key 'IFS' is bash's own: the batch script cannot pass it on"),
        ({"env": {"UID": "0"}}, "env key 'UID' is bash's own: the batch script cannot pass it on"),
        (
            {"env": {"BASH_ENV": "/tmp/x"}},
            "env key 'BASH_ENV' is bash's own: the batch script cannot pass it on",
        ),
        (
            {"env": {"SLURMPRE_CHECKPOINT_DIR": "/tmp"}},
            "env key 'SLURMPRE_CHECKPOINT_DIR' is slurmpre's own: it sets this name itself",
        ),
        (
            {"env": {"slurmpre_attempt": "1"}},
            "env key 'slurmpre_attempt' is slurmpre's own: it sets this name itself",
        ),
        ({"command": []}, "command = []: must name a program to run"),
        ({"command": "python 'unclosed"}, 'command = "python \'unclosed": cannot be split'),
        ({"command": 3}, "command = 3: must be a string or a list of strings"),
        ({"poll_interval": 0}, "poll_interval = 0: must be from 0.1 to 3600 seconds"),
        ({"poll_interval": float("inf")}, "poll_interval = inf: must be from 0.1 to 3600 seconds"),
        ({"poll_interval": "1e300"}, "poll_interval = '1e300': must be from 0.1 to 3600 seconds"),
        ({"poll_interval": "nan"}, "poll_interval = 'nan': must be from 0.1 to 3600 seconds"),
        (
            {"poll_interval": 280},
            "poll_interval = 280.0: must be shorter than preempt_window - safety_margin (270 s)",
        ),
        ({"warn_before_end": 99999999}, "warn_before_end = 99999999: must be 65535 or less"),
        ({"nodes": "99999999999999999999"}, "nodes = '99999999999999999999': is more than"),
        ({"gpus_per_node": 10**12}, "gpus_per_node = 1000000000000: must be 1024 or less"),
        ({"resume_arg": "--"}, "resume_arg = '--': cannot be right"),
        ({"resume_arg": "--launcher"}, "resume_arg = '--launcher': cannot be right"),
        ({"name": "a\u2028b"}, 'name = "a\\u2028b": must be one line'),
        ({"name": "a\x85b"}, 'name = "a\\u0085b": must be one line'),
        ({"setup": ["echo \0"]}, 'setup = "echo \\u0000": must not contain NUL'),
        ({"setup": ["echo a\u2029b"]}, 'setup = "echo a\\u2029b": must not contain NUL'),
        ({"poll_interval": "soon"}, "poll_interval = 'soon': must be a number of seconds"),
        ({"preempt_window": 0}, "preempt_window = 0: must be 1 or more"),
        (
            {"preempt_window": 60, "safety_margin": 60},
            "safety_margin = 60: must be smaller than preempt_window (60)",
        ),
        ({"drain_reason": "pre(empt"}, "drain_reason = 'pre(empt': is not a regular expression"),
        ({"notice_signal": "WAKEUP"}, "notice_signal = 'WAKEUP': is not a signal name"),
        ({"notice_signal": "usr2"}, "notice_signal = 'usr2': is reserved"),
        (
            {"extra_sbatch": ["--requeue"]},
            "extra_sbatch = '--requeue': slurmpre sets --requeue itself: use the key 'requeue'",
        ),
        (
            {"extra_sbatch": ["mail-type=END"]},
            "extra_sbatch = 'mail-type=END': 'mail-type=END' is not an sbatch option",
        ),
        (
            {"extra_sbatch": ["--mail-type=END --nodes=5 --no-requeue --constraint=standard"]},
            "slurmpre sets --nodes itself: use the key 'nodes'",
        ),
        ({"extra_sbatch": ["--no-req"]}, "--no-req would be read by sbatch as --no-requeue"),
        ({"extra_sbatch": ["--constr=standard"]}, "use the key 'constraint'"),
        ({"extra_sbatch": ["-N5"]}, "slurmpre sets --nodes itself: use the key 'nodes'"),
        ({"extra_sbatch": ["-HN5"]}, "slurmpre sets --nodes itself: use the key 'nodes'"),
        ({"extra_sbatch": ["-H -c 4"]}, "use the key 'cpus_per_task'"),
        ({"extra_sbatch": ["--n 3"]}, "--n is ambiguous to sbatch"),
        ({"extra_sbatch": ["--wrap=ls"]}, "--wrap is about submitting"),
        # Read as sbatch reads an #SBATCH line: its quotes, its backslashes, its aliases.
        ({"extra_sbatch": ["'--quiet --nodes=5'"]}, "is not an option name sbatch could take"),
        ({"extra_sbatch": ["'--no-requeue '"]}, "is not an option name sbatch could take"),
        ({"extra_sbatch": ['"--nodes"=5']}, "slurmpre sets --nodes itself"),
        ({"extra_sbatch": ["--no\\-requeue"]}, "slurmpre sets --no-requeue itself"),
        (
            {"extra_sbatch": ["--tasks-per-node=2"]},
            "--tasks-per-node would be read by sbatch as --ntasks-per-node",
        ),
        ({"extra_sbatch": ["--tasks 2"]}, "--tasks would be read by sbatch as --ntasks-per-node"),
        ({"extra_sbatch": ["--comment=a#b"]}, "an unquoted '#' inside a word"),
        ({"extra_sbatch": ["--comment=a\\ b"]}, "read a backslash before a space differently"),
        ({"extra_sbatch": ["'' --nodes=2"]}, "an empty quoted word stops sbatch"),
        ({"extra_sbatch": ["--comment='open"]}, "an unmatched '"),
        ({"extra_sbatch": ["hetjob"]}, "another component of a heterogeneous job"),
        ({"extra_sbatch": [":"]}, "stops sbatch"),
        ({"extra_sbatch": ["--container-image=nvcr.io/pytorch"]}, "inside a container"),
        ({"extra_sbatch": ["--container-mounts=/data:/data"]}, "where srun and scontrol are"),
        ({"extra_sbatch": ["--container=/bundle"]}, "inside a container"),
        ({"extra_sbatch": ["-kN5 --nodes=2"]}, "slurmpre sets --nodes itself"),
        # Commands that start a launcher of their own, however they are spelled.
        ({"command": ["python", "-mtorch.distributed.run", "t.py"]}, "starts torchrun"),
        ({"command": ["/usr/bin/env", "torchrun", "t.py"]}, "starts torchrun"),
        ({"command": "env A=1 python3 -u -m torch.distributed.launch t.py"}, "starts torchrun"),
        ({"command": ["nice", "-n", "5", "accelerate", "launch", "t.py"]}, "accelerate launch"),
        ({"command": ["python3.11", "-X", "dev", "-m", "deepspeed", "t.py"]}, "deepspeed"),
        ({"command": "srun python train.py"}, "starts srun: slurmpre already runs one task"),
        ({"command": ["/usr/bin/srun", "-n", "8", "python", "t.py"]}, "starts srun"),
        ({"command": ["env", "OMP_NUM_THREADS=1", "mpirun", "-np", "8", "t"]}, "starts mpirun"),
        ({"command": ["/opt/mpi/bin/mpiexec.hydra", "t"]}, "starts mpiexec, an MPI launcher"),
        # $NAME in the command expands on the node: its grammar is checked here.
        ({"command": ["python", "t.py", "--x=$(id)"]}, "in '--x=$(id)', '$(i' is not $NAME"),
        ({"command": "python t.py --out ${OUT"}, "in '${OUT', '${OUT' has no closing }"),
        ({"command": ["python", "t.py", "costs $5"]}, "'$5' is not $NAME, ${NAME} or $$"),
        ({"command": ["python", "t.py", "a$"]}, "(write $$ for a literal $)"),
        # Slurm's own ranges.
        ({"time": "99999999"}, "is longer than Slurm can hold"),
        ({"time": "24856-00:00:00"}, "is longer than Slurm can hold"),
        ({"array": "0-99999999999"}, "more than Slurm allows"),
        ({"array": "9-1"}, "the range 9-1 runs backwards"),
        ({"array": "0-9:0"}, "the step of 0-9:0 must be 1 or more"),
        ({"array": "0-9%0"}, "its %limit must run at least 1 task"),
        # Text that shows as something else than it is.
        ({"name": "job\u009b31m"}, "without control characters or bidirectional overrides"),
        ({"name": "evil\u202eexe.pt"}, "without control characters or bidirectional overrides"),
        ({"drain_reason": "a\u2066b"}, "bidirectional overrides"),
        ({"notice_signal": "KILL"}, "cannot be caught: the training could not checkpoint on it"),
        ({"notice_signal": "SIGSTOP"}, "cannot be caught"),
    ],
)
def test_bad_values_name_the_key(kw: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError) as info:
        spec(**kw)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_notice_settings() -> None:
    s = spec(
        poll_interval=2.5,
        preempt_window=60,
        safety_margin=15,
        notice_signal="usr1",
        drain_reason="^preempt",
    )
    assert (s.poll_interval, s.preempt_window, s.safety_margin) == (2.5, 60, 15)
    assert (s.notice_signal, s.drain_reason) == ("SIGUSR1", "^preempt")


def test_set_overrides_win_and_parse_as_toml(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_text('name = "job"\ncommand = ["x"]\nnodes = 4\n[env]\nA = "1"\nB = "2"\n')
    s = load(path, ["nodes=2-4", "requeue=false", "env.B=3", "time=1:00:00"], user="u")
    assert s.nodes == NodeRange(2, 4)
    assert s.requeue is False
    assert s.env == {"A": "1", "B": "3"}
    assert s.time == "1:00:00"
    assert parse_sets(["gpus_per_node=8"]) == {"gpus_per_node": 8}


def test_name_defaults_to_the_file_stem(tmp_path: Path) -> None:
    path = tmp_path / "sweep-7.toml"
    path.write_text('command = ["x"]\n')
    assert load(path, user="u").name == "sweep-7"


@pytest.mark.parametrize(
    ("text", "sets", "message"),
    [
        ('name = "j"\ncommand = ["x"]\nnodes = "3-1"\n', [], "nodes = '3-1': the range's minimum"),
        ('name = "j"\ncommand = ["x"]\n', ["nodes"], "--set 'nodes': expected key=value"),
        ('name = "j"\ncommand = ["x"]\n', ["gpu=2"], "unknown key 'gpu' (did you mean"),
        ("name = [unclosed\n", [], "not valid TOML"),
        ('name = "j"\n', [], "command: missing"),
        ('name = "j"\ncommand = ["x"]\n', ["env=3"], "env = 3: must be a table"),
    ],
)
def test_cli_bad_spec_is_one_line_exit_2(
    tmp_path: Path, text: str, sets: list[str], message: str
) -> None:
    path = tmp_path / "job.toml"
    path.write_text(text)
    args = ["render", str(path)]
    for item in sets:
        args += ["--set", item]
    proc = slurmpre_cli(*args)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert message in lines[0]


def test_missing_spec_file_is_exit_2(tmp_path: Path) -> None:
    proc = slurmpre_cli("submit", str(tmp_path / "nope.toml"), "--dry-run")
    assert proc.returncode == 2
    assert proc.stderr == f"slurmpre: error: spec file '{tmp_path / 'nope.toml'}' does not exist\n"


def test_extra_sbatch_is_one_normalized_option_per_line() -> None:
    s = spec(extra_sbatch=["-H --mail-type END", "#SBATCH --comment 'a b'", "--exclusive"])
    assert s.extra_sbatch == ("--hold", "--mail-type=END", "--comment='a b'", "--exclusive")


def test_a_value_that_starts_with_a_dash_reaches_the_wrapper_intact() -> None:
    from slurmpre.job.start.args import parse_args
    from slurmpre.login.render import launch_argv

    s = spec(resume_arg="-r", drain_reason="-preempt")
    argv = launch_argv(s)
    opts = parse_args(argv[argv.index("run") :])
    assert opts.resume_arg == "-r"
    assert opts.drain_reason is not None and opts.drain_reason.pattern == "-preempt"


def test_the_default_checkpoint_folder_follows_home(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/shared/home/bob")
    s = validate({**BASE}, python="/opt/venv/bin/python")
    assert s.checkpoint_dir == f"/shared/home/bob/checkpoints/{s.name}"


@pytest.mark.parametrize(
    ("command", "launcher", "use"),
    [
        (["torchrun", "--nproc-per-node=8", "train.py"], "torchrun", "torchrun"),
        (["/opt/venv/bin/torchrun", "train.py"], "torchrun", "torchrun"),
        (["python", "-m", "torch.distributed.run", "train.py"], "torchrun", "torchrun"),
        (["accelerate", "launch", "train.py"], "accelerate launch", "accelerate"),
        (["/venv/bin/accelerate-launch", "train.py"], "accelerate launch", "accelerate"),
        (
            ["python3.11", "-m", "accelerate.commands.launch", "train.py"],
            "accelerate",
            "accelerate",
        ),
        (["deepspeed", "train.py"], "the deepspeed launcher", "torchrun"),
        (["srun", "python", "train.py"], "srun", "torchrun"),
        (["/usr/bin/env", "srun", "--mpi=pmix", "train.py"], "srun", "torchrun"),
        (["mpirun", "-np", "16", "python", "train.py"], "mpirun", "torchrun"),
        (["mpiexec", "python", "train.py"], "mpiexec", "torchrun"),
    ],
)
@pytest.mark.parametrize("given", ["torchrun", "accelerate", "plain"])
def test_a_command_that_starts_a_launcher_is_refused_naming_the_key_to_use(
    command: list[str], launcher: str, use: str, given: str
) -> None:
    with pytest.raises(SpecError, match=rf"starts {launcher}.*launcher = '{use}'") as err:
        spec(command=command, launcher=given)
    assert "\n" not in str(err.value)


def test_each_launcher_is_a_key_value_and_others_are_refused() -> None:
    for name in ("torchrun", "accelerate", "plain"):
        assert spec(launcher=name).launcher is Launcher(name)
    with pytest.raises(
        SpecError, match=r"launcher .*'mpirun'.*'torchrun', 'accelerate' or 'plain'"
    ):
        spec(launcher="mpirun")


def test_scripts_and_other_modules_run_under_torchrun() -> None:
    for command in (["python", "train.py"], ["python", "-m", "mypkg.train"], ["train.py"]):
        assert spec(command=command).launcher is Launcher.TORCHRUN


def test_a_gpu_type_is_asked_for_as_slurm_writes_it() -> None:
    from slurmpre.login.render import render

    for kw in ({"gpus_per_node": "h100:8"}, {"gpus_per_node": 8, "gpu_type": "h100"}):
        s = spec(**kw)
        assert (s.gpu_type, s.gpus_per_node) == ("h100", 8)
        assert "#SBATCH --gpus-per-node=h100:8\n" in render(s)
    assert "#SBATCH --gpus-per-node=8\n" in render(spec(gpus_per_node="8"))


def test_gpus_for_the_whole_job_are_asked_for_with_their_type() -> None:
    from slurmpre.login.render import render

    for kw in ({"gpus": "h100:16"}, {"gpus": 16, "gpu_type": "h100"}):
        s = spec(nodes="1-4", **kw)
        assert (s.gpu_type, s.gpus, s.gpus_per_node) == ("h100", 16, 0)
        text = render(s)
        assert "#SBATCH --gpus=h100:16\n" in text and "--gpus-per-node" not in text
    with pytest.raises(SpecError, match=r"slurmpre sets --gpus itself: use the key 'gpus'"):
        spec(extra_sbatch=["--gpus=h100:16"])
    with pytest.raises(SpecError, match=r"--gpus itself: use the key 'gpus'"):
        spec(extra_sbatch=["-G h100:16"])


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"gpus_per_node": "h 100:8"}, "gpus_per_node = 'h 100:8': must be a count, or TYPE:COUNT"),
        ({"gpus_per_node": "h100:"}, "gpus_per_node = 'h100:': must be a count, or TYPE:COUNT"),
        ({"gpus_per_node": "h100:-1"}, "gpus_per_node = -1: must be 0 or more"),
        ({"gpu_type": "h100"}, "gpu_type = 'h100': needs gpus_per_node or gpus of 1 or more"),
        ({"gpus": "h100:16", "gpus_per_node": 8}, "gpus = 16: asks for GPUs per job, and"),
        ({"gpus": "a100:16", "gpu_type": "h100"}, "gpu_type = 'h100': but gpus names 'a100'"),
        ({"gpus": "h100:x"}, "gpus = 'x': must be a whole number"),
        ({"gpus": 2**21}, "gpus = 2097152: must be 1048576 or less"),
        ({"gpu_type": "$(id)", "gpus_per_node": 1}, "gpu_type = '$(id)': must be a GPU type"),
        (
            {"gpus_per_node": "a100:8", "gpu_type": "h100"},
            "gpu_type = 'h100': but gpus_per_node names 'a100'",
        ),
    ],
)
def test_bad_gpu_requests_are_one_line(kw: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError) as err:
        spec(**kw)
    assert str(err.value).startswith(message)


def test_a_managed_option_in_extra_sbatch_says_which_key_to_write() -> None:
    with pytest.raises(SpecError) as err:
        spec(extra_sbatch=["--gpus-per-node=h100:8"])
    assert str(err.value).endswith(
        "slurmpre sets --gpus-per-node itself: use the key 'gpus_per_node' "
        '(gpus_per_node = "h100:8")'
    )


@pytest.mark.parametrize(
    "value", ["a\\b", 'say "hi"', "it's", "back\\\\slash", "a b#c", "$HOME", "\\"]
)
def test_an_option_value_reads_back_as_sbatch_reads_it(value: str) -> None:
    from slurmpre.login import sbatch_options

    s = spec(extra_sbatch=[f"--comment={sbatch_options.quote(value)}"])
    (line,) = s.extra_sbatch
    for escaped_space in (True, False):  # 24.11 on, and 22.05
        assert sbatch_options.words(line, escaped_space=escaped_space) == [f"--comment={value}"]


def test_every_name_sbatch_could_read_as_a_managed_option_is_refused() -> None:
    """In any release: an option slurmpre sets, a prefix of one (sbatch reads it as that
    option, or refuses it as ambiguous), or a second name of one; a name no managed option
    starts with passes as written, whichever releases have it."""
    from slurmpre.login import sbatch_options

    for full in [*sbatch_options.MANAGED, *sbatch_options.ALIASES]:
        for end in range(1, len(full) + 1):
            with pytest.raises(sbatch_options.OptionError, match=r"slurmpre sets|ambiguous"):
                sbatch_options.parse_entry(f"--{full[:end]}=1")
    assert sbatch_options.resolve("spread-segments") == "spread-segments"  # 26.05 only
    assert sbatch_options.resolve("mem-per-cpu") == "mem-per-cpu"  # longer than --mem
    with pytest.raises(sbatch_options.OptionError, match="as --ntasks-per-node"):
        sbatch_options.resolve("tasks-per")


def test_what_sbatch_alone_can_judge_is_left_to_it() -> None:
    """A value an option lacks or takes none of, in one release or all: sbatch refuses
    the entry at submit (`submit --test-only` asks it first)."""
    s = spec(extra_sbatch=["--mail-type", "--hold=yes", "--get-user-env=10L"])
    assert s.extra_sbatch == ("--mail-type", "--hold=yes", "--get-user-env=10L")


def test_path_keys_expand_home_user_and_variables_at_submit() -> None:
    environ = {"HOME": "/home/bob", "USER": "bob", "SCRATCH": "/scratch"}
    raw = {"name": "j", "command": ["python"], "checkpoint_dir": "${SCRATCH}/$USER/ck",
           "log_dir": "~/logs/$$x", "python": "$HOME/venv/bin/python"}  # fmt: skip
    spec = validate(raw, environ=environ)
    assert spec.checkpoint_dir == "/scratch/bob/ck"
    assert spec.log_dir == "/home/bob/logs/$x"
    assert spec.python == "/home/bob/venv/bin/python"
    assert validate({**raw, "template": "~/t/$USER.j2"}, environ=environ).template == (
        "/home/bob/t/bob.j2"
    )
    # A user named explicitly (tests, another account) has that user's home.
    assert validate({**raw, "checkpoint_dir": "~"}, user="al", environ=environ).checkpoint_dir == (
        "/home/al"
    )


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("checkpoint_dir", "/s/$NOPE/ck", "checkpoint_dir = '/s/$NOPE/ck': $NOPE is not set"),
        ("log_dir", "~alice/x", "log_dir = '~alice/x': only ~ alone (your $HOME) is read"),
        ("checkpoint_dir", "/s/$(id)", "checkpoint_dir = '/s/$(id)': '$(i' is not $NAME"),
        ("python", "/s/${HOME:-x}", "python = '/s/${HOME:-x}': '${H' is not $NAME"),
        ("checkpoint_dir", "rel/$USER", "checkpoint_dir = 'rel/$USER': must be an absolute"),
        ("checkpoint_dir", "/a/$", "checkpoint_dir = '/a/$': '$' is not $NAME"),
        ("checkpoint_dir", "/a/$_", "checkpoint_dir = '/a/$_': $_ is the shell's last"),
        # The value used is checked, not the one typed (#35): an empty variable names a
        # folder above the one meant, and a line break would end the #SBATCH line.
        ("checkpoint_dir", "~/ck/$EXP", "checkpoint_dir = '~/ck/$EXP': $EXP is empty"),
        ("log_dir", "/l/${BLANK}", "log_dir = '/l/${BLANK}': $BLANK is empty"),
        ("checkpoint_dir", "/c/$EVIL", "checkpoint_dir = '/c/$EVIL': $EVIL holds a line break"),
        ("python", "/p/$CTRL/python", "python = '/p/$CTRL/python': $CTRL holds a line break"),
        ("template", "/t/$EVIL.j2", "template = '/t/$EVIL.j2': $EVIL holds a line break"),
        # Too long for a file system: an OSError and exit 3 at submit, before (#35).
        ("checkpoint_dir", "/c/" + "b" * 256, "checkpoint_dir = '/c/bbb"),
        ("log_dir", "/l" * 2100, "log_dir = '/l/l/l"),
        ("checkpoint_dir", "/c/$LONG", "checkpoint_dir = '/c/$LONG': has a name of 300 bytes"),
    ],
)  # fmt: skip
def test_path_variables_that_cannot_expand_are_one_line_errors(
    key: str, value: str, message: str
) -> None:
    raw = {"name": "j", "command": ["python"], key: value}
    environ = {"HOME": "/home/bob", "USER": "bob", "EXP": "", "BLANK": " ",
               "EVIL": "x\n#SBATCH --uid=0", "CTRL": "a\x1bb", "LONG": "é" * 150}  # fmt: skip
    with pytest.raises(SpecError) as info:
        validate(raw, environ=environ)
    assert str(info.value).startswith(message), str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("value", ["$(id)", "${A:-b}", "$1", "a$", "${A", "$-", "`x` $_"])
def test_env_values_with_other_shell_syntax_are_refused(value: str) -> None:
    with pytest.raises(SpecError, match=r"^env\.X = .*(not \$NAME|last argument|no closing)"):
        validate({"name": "j", "command": ["python"], "env": {"X": value}})


def test_env_may_set_the_slurmpre_names_a_user_sets_and_names_near_bashs() -> None:
    env = {"SLURMPRE_SHARED_DIR": "/home/a/w", "SLURMPRE_SHARED_WATCH": "0", "_X": "1", "PS1": "x"}
    spec = validate({"name": "j", "command": ["python"], "env": env})
    assert spec.env == env


def test_accelerate_config_is_checked_at_submit_and_reaches_the_wrapper(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from slurmpre.job.start.args import parse_args
    from slurmpre.login.render import launch_argv

    config = tmp_path / "fsdp.yaml"
    config.write_text("distributed_type: FSDP\nmixed_precision: bf16\n")
    monkeypatch.setenv("CFG_DIR", str(tmp_path))
    s = spec(launcher="accelerate", accelerate_config="$CFG_DIR/fsdp.yaml")
    assert s.accelerate_config == str(config)  # a path key: $VAR expanded at submit
    argv = launch_argv(s)
    assert f"--accelerate-config={config}" in argv
    opts = parse_args(argv[argv.index("run") :])
    assert opts.accelerate_config == str(config)
    config.unlink()  # a node that cannot see it fails before it launches, naming it
    with pytest.raises(UsageError, match=r"--accelerate-config '.*fsdp.yaml' cannot be read"):
        parse_args(argv[argv.index("run") :])


@pytest.mark.parametrize(
    ("content", "kw", "message"),
    [
        (None, {}, "does not exist"),
        ("a: [1,\n", {}, "is not YAML"),
        ("- FSDP\n", {}, "is not a mapping of Accelerate's settings"),
        ("distributed_type: FSDP\n", {"launcher": "torchrun"}, "set launcher = 'accelerate'"),
    ],
)
def test_a_bad_accelerate_config_is_one_line_naming_it(
    tmp_path: Path, content: str | None, kw: dict[str, object], message: str
) -> None:
    config = tmp_path / "c.yaml"
    if content is not None:
        config.write_text(content)
    with pytest.raises(SpecError, match=re.escape(message)) as err:
        spec(**{"launcher": "accelerate", "accelerate_config": str(config), **kw})
    assert str(err.value).startswith(f"accelerate_config = '{config}'")
    assert "\n" not in str(err.value)


def test_accelerate_launch_with_its_config_file_names_the_key_for_it() -> None:
    command = ["accelerate", "launch", "--config_file", "fsdp.yaml", "train.py"]
    with pytest.raises(SpecError, match=r"accelerate_config = 'PATH'"):
        spec(command=command, launcher="accelerate")


def test_accelerates_own_reader_refuses_what_it_would_refuse_on_every_node(
    tmp_path: Path,
) -> None:
    pytest.importorskip("accelerate")
    import sys

    from slurmpre.login.submit import check_python

    good = tmp_path / "good.yaml"
    good.write_text("distributed_type: MULTI_GPU\nmixed_precision: bf16\n")
    check_python(sys.executable, accelerate_config=str(good))
    bad = tmp_path / "bad.yaml"
    bad.write_text("distributed_type: MULTI_GPU\ngradient_accumulation_steps: 3\n")
    with pytest.raises(UsageError, match=r"accelerate cannot read it \(ValueError: .*unknown keys"):
        check_python(sys.executable, accelerate_config=str(bad))


@pytest.mark.parametrize(
    ("raw", "named"),
    [({"deadline": "soon", "total_steps": 10}, "deadline = 'soon'"),
     ({"deadline": "8h"}, "deadline = '8h': needs total_steps"),
     ({"deadline": "8h", "total_steps": 10, "restart": "requeue"}, "needs restart = 'successor'"),
     ({"fallback_after": 0}, "fallback_after = 0"),
     ({"max_wait": "soon"}, "max_wait = 'soon'"),
     ({"max_wait": "0s"}, "max_wait = '0s'"),
     ({"max_cost": "lots"}, "max_cost = 'lots'"),
     ({"max_cost": -1}, "max_cost = -1"),
     ({"max_preemptions": -1}, "max_preemptions = -1"),
     ({"total_steps": 0}, "total_steps = 0")],
)  # fmt: skip
def test_the_runs_bounds_are_checked_one_line_each(raw: dict[str, object], named: str) -> None:
    from slurmpre.login.spec import validate

    with pytest.raises(UsageError) as err:
        validate({"name": "x", "command": ["python", "t.py"], **raw}, user="alice")
    assert named in str(err.value) and "\n" not in str(err.value)


def test_the_runs_bounds_read_as_a_user_writes_them() -> None:
    from slurmpre.login.spec import validate

    spec = validate(
        {"name": "x", "command": ["python", "t.py"], "deadline": "2026-12-10T18:00+01:00",
         "total_steps": 1000, "max_wait": "30m", "max_cost": 500, "fallback_after": 3,
         "max_preemptions": 40},
        user="alice",
    )  # fmt: skip
    assert (spec.deadline, spec.total_steps, spec.max_wait, spec.max_cost) == (
        "2026-12-10T18:00+01:00", 1000, 1800.0, 500.0
    )  # fmt: skip
    assert (spec.fallback_after, spec.max_preemptions) == (3, 40)
    assert validate({"name": "x", "command": ["a"], "max_wait": 90}, user="a").max_wait == 90.0


def test_string_keys_take_set_values_as_written(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_text('name = "job"\ncommand = ["x"]\n')
    sets = ["time=12:00:00", "account=12345", "partition=2024", 'qos="a-b"', "mem=64G"]
    s = load(path, sets, user="u")
    assert (s.time, s.account, s.partition, s.qos, s.mem) == (
        "12:00:00",
        "12345",
        "2024",
        "a-b",
        "64G",
    )
    assert load(path, ["time=90"], user="u").time == "90"  # 90 minutes, as Slurm reads it
    assert load(path, ["nodes=4", "requeue=false"], user="u").nodes == NodeRange(4, 4)  # TOML


def test_string_keys_take_bare_toml_values_from_the_file_as_written(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_text(
        'name = "job"\ncommand = ["x"]\ntime = 90\naccount = 12345\n'
        "deadline = 2026-12-06T09:00:00\ntotal_steps = 10\n"
    )
    s = load(path, user="u")
    assert (s.time, s.account, s.deadline) == ("90", "12345", "2026-12-06T09:00:00")
    path.write_text('name = "job"\ncommand = ["x"]\ntime = 12:00:00\n')
    assert load(path, user="u").time == "12:00:00"


@pytest.mark.parametrize(
    ("text", "sets", "message"),
    [
        ("time = 12:00:00.5\n", [], "time = 12:00:00.500000: must be a Slurm time"),
        ("", ["time=12:61:xx"], "time = '12:61:xx': must be a Slurm time"),
        ("mem = 1.5\n", [], "mem = 1.5: must be a string"),
        ("nodes = 12:00:00\n", [], "nodes = 12:00:00: must be a count"),
        ("requeue = 2026-12-06\n", [], "requeue = 2026-12-06: must be true or false"),
        ('command = ["x", 1]\n', [], "command = ['x', 1]: must be a string or a list of strings"),
        ("launcher = 7\n", [], "launcher = 7: must be 'torchrun', 'accelerate' or 'plain'"),
        ('name = "it\'s"\n', ["nodes=0"], "nodes = 0: needs at least 1 node"),
    ],
)
def test_values_in_messages_are_as_the_spec_writes_them(
    tmp_path: Path, text: str, sets: list[str], message: str
) -> None:
    path = tmp_path / "job.toml"
    base = [line for line in ('name = "j"', 'command = ["x"]') if line.split()[0] not in text]
    path.write_text("\n".join([*base, text]))
    with pytest.raises(SpecError) as info:
        load(path, sets, user="u")
    assert str(info.value).startswith(message)
    assert "datetime" not in str(info.value)


def test_as_written_shows_a_value_as_toml_writes_it() -> None:
    import datetime as dt

    from slurmpre.keys import as_written

    table = [
        ("a b", "'a b'"), ("it's", '"it\'s"'), ("a\nb", '"a\\nb"'), ("x\u202ey", '"x\\u202Ey"'),
        (12, "12"), (1.5, "1.5"), (float("inf"), "inf"), (True, "true"),
        (dt.time(12, 0), "12:00:00"), (dt.date(2026, 12, 6), "2026-12-06"),
        (["python", "x"], "['python', 'x']"), ({"A": "1", "b c": 2}, "{A = '1', 'b c' = 2}"),
        (Launcher.TORCHRUN, "'torchrun'"),
    ]  # fmt: skip
    assert [as_written(value) for value, _ in table] == [shown for _, shown in table]


def test_a_nested_srun_or_mpirun_is_one_line_saying_what_to_write() -> None:
    with pytest.raises(SpecError) as err:
        spec(command="srun python train.py")
    assert str(err.value) == (
        "command = 'srun python train.py': starts srun: slurmpre already runs one task per "
        "node under srun and starts the launcher there (launcher = 'torchrun', the default). "
        "Give the script itself (python train.py ...), or launcher = 'plain' to run it as "
        "is, once per node"
    )
    for command in (["srunner", "x"], ["python", "srun"], ["mpirun.sh"], ["./my_mpirun"]):
        assert spec(command=command).command == tuple(command)  # none is one of them


@pytest.mark.parametrize(
    "command",
    [
        ["python", "train.py", "--output_dir", "$SLURMPRE_CHECKPOINT_DIR"],
        ["python", "t.py", "--out=${SLURMPRE_CHECKPOINT_DIR}/x", "price $$5", "$$"],
        ["python", "t.py", "`id`", "a;b", "*"],  # no $: kept as written, never run
    ],
)
def test_a_command_keeps_its_variables_for_the_nodes(command: list[str]) -> None:
    assert spec(command=command).command == tuple(command)


def _unknown(command: list[str], **kw: object) -> list[str]:
    from slurmpre.login import variables

    s = spec(command=command, **kw)
    plain = s.launcher is Launcher.PLAIN
    return variables.unknown_in_command(s.command, s.env, {"HOME": "/h"}, plain=plain)


def test_a_variable_nothing_is_known_to_set_is_named() -> None:
    """Known: slurmpre's own for every training, Slurm's, the spec's env, where you
    submit, and (launcher = "plain") the rendezvous variables slurmpre sets."""
    known = ["$SLURMPRE_CHECKPOINT_DIR", "${SLURMPRE_RESUME_FROM}", "$SLURM_JOB_ID",
             "$SLURMD_NODENAME", "$HOME/x", "$SEED", "$$NOT_A_VARIABLE"]  # fmt: skip
    assert _unknown(["python", "t.py", *known], env={"SEED": "1"}) == []
    assert _unknown(["python", "t.py", "$RANK", "$OUT", "${OUT}", "$SLURMPRE_CKPT"]) == [
        "RANK", "OUT", "SLURMPRE_CKPT",  # under torchrun, RANK is set per worker, not here
    ]  # fmt: skip
    assert _unknown(["python", "t.py", "$RANK", "$MASTER_ADDR"], launcher="plain") == []


def test_the_warning_is_one_line() -> None:
    from slurmpre.login.variables import command_warning

    assert command_warning([]) is None
    assert command_warning(["OUT"]) == (
        "warning: command names $OUT, which is not set here, nor in the spec's env, nor one "
        "slurmpre or Slurm sets: the job stops at its start unless the nodes set it"
    )
    assert command_warning(["A", "B"]).startswith(  # type: ignore[union-attr]
        "warning: command names $A, $B, which are not set here"
    )


def test_submit_warns_of_a_variable_nothing_sets_and_queues_anyway(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from slurmpre.login.submit import submit

    from tests.test_resuming import Submits, spec_in

    monkeypatch.delenv("OUTPUT_DIR", raising=False)
    command = '["python", "train.py", "--out", "$OUTPUT_DIR", "$SLURMPRE_CHECKPOINT_DIR"]'
    s = load(spec_in(tmp_path, tmp_path / "ck"), [f"command={command}"])
    said: list[str] = []
    client = Submits()
    with sent_to(said.append, submit.__module__):
        assert submit(s, client).job_id == "101"
    assert said[0] == (
        "warning: command names $OUTPUT_DIR, which is not set here, nor in the spec's env, "
        "nor one slurmpre or Slurm sets: the job stops at its start unless the nodes set it"
    )
    assert "'$OUTPUT_DIR' '$SLURMPRE_CHECKPOINT_DIR'" in client.scripts[0]  # for the nodes
    monkeypatch.setenv("OUTPUT_DIR", "/scratch/out")  # set where you submit: sbatch hands it on
    said.clear()
    with sent_to(said.append, submit.__module__):
        submit(s, client)
    assert not [line for line in said if line.startswith("warning:")]


def test_a_dry_run_warns_of_a_variable_nothing_sets_as_submit_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from slurmpre.login.submit import dry_run

    from tests.test_resuming import Submits, spec_in

    monkeypatch.delenv("OUTPUT_DIR", raising=False)
    command = '["python", "train.py", "--out", "$OUTPUT_DIR"]'
    s = load(spec_in(tmp_path, tmp_path / "ck"), [f"command={command}"])
    said: list[str] = []
    client = Submits()
    with sent_to(said.append, dry_run.__module__):
        script = dry_run(s, client)
    assert said[0].startswith("warning: command names $OUTPUT_DIR, which is not set here")
    assert "'$OUTPUT_DIR'" in script and client.scripts == []
