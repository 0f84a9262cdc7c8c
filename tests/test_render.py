"""Rendered sbatch scripts: golden files, shell validity, hostile values, user templates.

Regenerate the golden files after an intended change with
``SLURMPRE_REGEN_GOLDEN=1 ./bin/test tests/test_render.py`` and review the diff.
"""

from __future__ import annotations

import difflib
import os
import shlex
import subprocess
from pathlib import Path

import pytest
from slurmpre.errors import UsageError
from slurmpre.login.render import command_line, launch_argv, output_pattern, python_bin, render
from slurmpre.login.spec import JobSpec, load, validate

ROOT = Path(__file__).parent.parent
GOLDEN = Path(__file__).parent / "golden"
EXAMPLES = sorted((ROOT / "examples").glob("*.toml"))
HOSTILE_NAME = "run 'q' \"dq\" $(touch pwned) `id`; echo x é中 50%"


def load_example(path: Path) -> JobSpec:
    return load(path, user="alice", python="/opt/venv/bin/python")


def hostile_spec(**kw: object) -> JobSpec:
    raw: dict[str, object] = {
        "name": HOSTILE_NAME,
        "command": [
            "python",
            "train.py",
            "--tag",
            "a b; rm -rf ~",
            "$$(whoami)",
            "$SLURMPRE_CHECKPOINT_DIR",
            "`id`",
            "new\nline",
        ],
        "nodes": "1-2",
        "launcher": "plain",
        "checkpoint_dir": "/shared/ckpt dir/it's $$HOME, not $HOME",
        "env": {
            "TRICKY": "$$(echo no) `echo no` 'single' \"double\" ; & | \\ é中\nsecond line",
            "EXPANDS": '${USER}:`echo no`:"$TRICKY":$$USER:\\',
        },
        **kw,
    }
    return validate(raw, user="alice", python="/opt/my venv/bin/python")


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("SLURMPRE_REGEN_GOLDEN") == "1":
        path.write_text(text)
    expected = path.read_text()
    if text != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True),
                text.splitlines(keepends=True),
                f"golden/{name}",
                "rendered",
            )
        )
        pytest.fail(f"rendered script differs from golden/{name}:\n{diff}", pytrace=False)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_examples_match_golden_files(example: Path) -> None:
    check_golden(f"{example.stem}.sbatch", render(load_example(example)))


def test_hostile_values_match_golden_file() -> None:
    check_golden("hostile.sbatch", render(hostile_spec()))


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_rendered_scripts_pass_bash_n(example: Path) -> None:
    subprocess.run(["bash", "-n"], input=render(load_example(example)), text=True, check=True)
    subprocess.run(["bash", "-n"], input=render(hostile_spec()), text=True, check=True)


def test_default_script_carries_the_preemptible_contract() -> None:
    lines = render(load_example(ROOT / "examples" / "finetune.toml")).splitlines()
    for directive in (
        "#SBATCH --constraint=preemptible",
        "#SBATCH --requeue",
        "#SBATCH --nodes=2-4",
        "#SBATCH --open-mode=append",
        "#SBATCH --signal=USR2@300",
        "#SBATCH --gpus-per-node=8",
        "#SBATCH --time=2-00:00:00",
    ):
        assert directive in lines
    launch = next(ln for ln in lines if "-m slurmpre.job run" in ln)
    assert launch.split()[:4] == ["/opt/venv/bin/python", "-m", "slurmpre.job", "run"]
    assert "--launcher torchrun" in launch
    # srun does not inherit sbatch's --cpus-per-task (Slurm >= 22.05): it is given again.
    stripped = [ln.strip() for ln in lines]
    assert "srun --ntasks-per-node=1 --kill-on-bad-exit=1 --label --cpus-per-task=32 \\" in stripped
    # Several nodes: slurmpre's supervisor runs the srun, to restart in place after a drain.
    supervisor = next(ln for ln in lines if "-m slurmpre.job steps" in ln)
    assert supervisor.split()[4:] == [
        "--checkpoint-dir=/home/alice/checkpoints/llama-finetune",
        "--",
        "\\",
    ]
    assert "--min-nodes 2" in launch
    # Elastic: no --ntasks-per-node in the allocation, or Slurm gives only MIN nodes.
    assert not any(ln.startswith("#SBATCH --ntasks-per-node") for ln in lines)


def test_coordinator_stays_on_standard_nodes_without_requeue() -> None:
    text = render(load_example(ROOT / "examples" / "coordinator.toml"))
    assert "#SBATCH --constraint=standard" in text.splitlines()
    assert "#SBATCH --no-requeue" in text.splitlines()
    assert "#SBATCH --ntasks-per-node=1" in text.splitlines()


def test_quoting_round_trips_through_the_shell() -> None:
    """What the shell makes of the launch line is exactly the argv we meant."""
    spec = hostile_spec()
    quoted = " ".join(shlex.quote(a) for a in launch_argv(spec))
    out = subprocess.run(
        ["bash", "-c", f'printf "%s\\0" {quoted}'], capture_output=True, check=True
    ).stdout
    assert out.decode().split("\0")[:-1] == launch_argv(spec)


def test_percent_in_paths_is_escaped_for_slurm() -> None:
    assert output_pattern(hostile_spec()).endswith(" é中 50%%-%j.out")
    arr = hostile_spec(array="0-3")
    assert output_pattern(arr).endswith("-%A_%a.out")
    with pytest.raises(UsageError, match="disables %-patterns"):
        output_pattern(hostile_spec(log_dir="/a\\b"))


def test_user_template_extends_the_default(tmp_path: Path) -> None:
    (tmp_path / "site.sbatch.j2").write_text(
        '{% extends "default.sbatch.j2" %}\n'
        "{% block setup %}\nmodule load cuda/12.4  # site setup for {{ spec.name | q }}\n"
        "{% endblock %}\n"
    )
    (tmp_path / "job.toml").write_text(
        'name = "j k"\ncommand = ["python", "t.py"]\ntemplate = "site.sbatch.j2"\n'
    )
    text = render(load(tmp_path / "job.toml", user="u", python="/p"))
    assert "module load cuda/12.4  # site setup for 'j k'" in text
    assert "#SBATCH --constraint=preemptible" in text


def test_template_errors_are_usage_errors(tmp_path: Path) -> None:
    (tmp_path / "bad.j2").write_text("{{ nonexistent_value }}\n")
    (tmp_path / "job.toml").write_text('name = "j"\ncommand = ["x"]\ntemplate = "bad.j2"\n')
    with pytest.raises(UsageError, match=r"template bad\.j2: 'nonexistent_value' is undefined"):
        render(load(tmp_path / "job.toml", user="u", python="/p"))
    (tmp_path / "job.toml").write_text('name = "j"\ncommand = ["x"]\ntemplate = "missing.j2"\n')
    with pytest.raises(UsageError, match=r"template = .*missing\.j2': no such file"):
        render(load(tmp_path / "job.toml", user="u", python="/p"))


def test_the_job_finds_the_environment_slurmpre_runs_from() -> None:
    """A command of "python" or "python3" must reach the interpreter that has slurmpre (the
    venv it was installed in), unless setup activates another environment after it."""
    assert python_bin("/home/u/venv/bin/python") == "/home/u/venv/bin"
    assert python_bin("/usr/bin/python3") is None
    base = {"name": "j", "command": ["python", "train.py"]}
    venv = render(
        validate(
            {**base, "setup": ["source /opt/other/bin/activate"]}, python="/home/u/venv/bin/python"
        )
    )
    assert venv.index('export PATH=/home/u/venv/bin:"$PATH"') < venv.index("source /opt/other")
    assert "export PATH=" not in render(validate(base, python="/usr/bin/python3"))


def test_env_values_expand_from_the_jobs_environment_and_nothing_else() -> None:
    """$NAME and ${NAME} read the job's environment as the script starts (before any env
    key is set: B reads the old A), $$ is a $, and no other syntax is run or split."""
    from tests.test_render_property import env_block_values

    env = {
        "LD_LIBRARY_PATH": "/opt/nccl/lib:$LD_LIBRARY_PATH",
        "A": "new",
        "B": "${A}x",
        "LIT": "$$HOME and $$(id)",
        "Q": '"q" `id` \\ * $USER ${MISSING}.',
        "PLAIN": "no dollar `id` *",
    }
    script = render(validate({"name": "j", "command": ["python"], "env": env}, user="alice"))
    got = env_block_values(
        script, list(env), {"LD_LIBRARY_PATH": "/usr/lib", "A": "old", "USER": "alice"}
    )
    assert got == {
        "LD_LIBRARY_PATH": "/opt/nccl/lib:/usr/lib",
        "A": "new",
        "B": "oldx",
        "LIT": "$HOME and $(id)",
        "Q": '"q" `id` \\ * alice .',
        "PLAIN": "no dollar `id` *",
    }


def test_a_cluster_that_allows_an_expedited_requeue_gets_one_asked_for() -> None:
    """26.05 with SlurmctldParameters=enable_expedited_requeue: `--requeue=expedite`
    (immediately eligible again); elsewhere `--requeue`, and never for a job without it."""
    from slurmpre.slurm.parse import expedited_requeue, parse_config

    from tests.conftest import DATA

    spec = validate({"name": "x", "command": ["python", "t.py"]}, user="alice")
    assert "#SBATCH --requeue=expedite\n" in render(spec, expedite=True)
    assert "#SBATCH --requeue\n" in render(spec)
    off = validate({"name": "x", "command": ["python", "t.py"], "requeue": False}, user="alice")
    assert "#SBATCH --no-requeue\n" in render(off, expedite=True)
    captured = parse_config((DATA / "slurm-26.05" / "config.txt").read_text())
    assert not expedited_requeue(captured)  # not enabled unless the administrator does
    enabled = {**captured, "SlurmctldParameters": "rl_enable,enable_expedited_requeue"}
    assert expedited_requeue(enabled)


def test_sbatch_is_given_the_scripts_own_options_on_its_command_line() -> None:
    """sbatch takes its command line over the script's #SBATCH lines and the user's
    SBATCH_* variables: every option slurmpre wrote goes there too, read back as sbatch
    reads the line, and the spec's extra_sbatch entries stay in the script alone."""
    spec = validate(
        {"name": "it's x", "command": ["python", "t.py"], "nodes": 2, "partition": "gpu",
         "warn_before_end": 60, "extra_sbatch": ["--mail-type=END", "--comment 'a b'"],
         "checkpoint_dir": "/ck"},
        user="alice",
    )  # fmt: skip
    script = render(spec)
    assert "#SBATCH --comment='a b'\n" in script and "#SBATCH --mail-type=END\n" in script
    assert command_line(spec, script) == [
        "--job-name=it's x",
        "--nodes=2",
        "--ntasks-per-node=1",
        "--constraint=preemptible",
        "--requeue",
        "--open-mode=append",
        "--output=/ck/logs/it's x-%j.out",
        "--signal=USR2@60",
        "--partition=gpu",
    ]


@pytest.mark.parametrize(
    ("nodes", "held", "min_nodes"), [(4, "5", None), ("2-4", "3-5", "--min-nodes 2")]
)
def test_spares_are_asked_of_slurm_beside_the_nodes_and_run_the_supervisor(
    nodes: object, held: str, min_nodes: str | None
) -> None:
    spec = validate({"name": "s", "command": ["python", "t.py"], "nodes": nodes, "spare_nodes": 1})
    lines = render(spec).splitlines()
    assert f"#SBATCH --nodes={held}" in lines
    supervisor = next(ln for ln in lines if "-m slurmpre.job steps" in ln)
    assert "--spares=1" in supervisor.split()
    launch = next(ln for ln in lines if "-m slurmpre.job run" in ln)
    assert "--spare-nodes 1" in launch  # a grown successor holds its spares too
    assert (min_nodes in launch) if min_nodes else "--min-nodes" not in launch
    # Without spares, a fixed count runs no supervisor and asks for its nodes alone.
    plain = render(validate({"name": "s", "command": ["python", "t.py"], "nodes": 4}))
    assert "#SBATCH --nodes=4" in plain.splitlines() and "slurmpre.job steps" not in plain


@pytest.mark.parametrize("key", ["in_place", "watch"])
def test_spares_without_the_in_place_restart_are_refused_naming_the_key(key: str) -> None:
    with pytest.raises(UsageError, match=f"spare_nodes = 1: .* it needs {key} = true"):
        validate({"name": "s", "command": ["python", "t.py"], "spare_nodes": 1, key: False})


@pytest.mark.parametrize("bad", [-1, 65, "two", 1.5])
def test_a_bad_spare_count_is_one_line_naming_it(bad: object) -> None:
    with pytest.raises(UsageError, match=f"spare_nodes = {bad!r}: must be"):
        validate({"name": "s", "command": ["python", "t.py"], "spare_nodes": bad})
