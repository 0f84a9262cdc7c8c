"""``$NAME`` in the command: expanded on the node from the environment the training gets
(`slurmpre.job.start.expand`), through the wrapper's own path (`launch`, `run_attempt`);
a variable that is not set stops the run at once, in one line, with exit 2."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from slurmpre.errors import UsageError
from slurmpre.folder.layout import FolderLayout
from slurmpre.folder.ledger import Choice, Ledger
from slurmpre.job.start import expand
from slurmpre.job.start.args import parse_args
from slurmpre.job.start.env import read_job_env
from slurmpre.job.start.launch import launch
from slurmpre.slurm.parse import NodeInfo

from tests.fakes import FakeSlurm

ENV = {"D": "/ck", "A": "two words", "E": "", "STAR": "*"}


@pytest.mark.parametrize(
    ("argv", "expanded"),
    [
        (["python", "train.py"], ["python", "train.py"]),
        (["--output_dir", "$D"], ["--output_dir", "/ck"]),
        (["--output_dir=${D}/run", "$D$D"], ["--output_dir=/ck/run", "/ck/ck"]),
        (["$A"], ["two words"]),  # one argument stays one: nothing is split
        (["*.py", "$STAR", "~", "$E"], ["*.py", "*", "~", ""]),  # no glob, no ~; set empty: ""
        (["price $$5", "$$D", "$${D}"], ["price $5", "$D", "${D}"]),  # $$ is a $
        (["`id`", "a;b", "'q'"], ["`id`", "a;b", "'q'"]),  # nothing else is read
    ],
)
def test_variables_expand_as_in_double_quotes(argv: list[str], expanded: list[str]) -> None:
    assert expand.command(argv, ENV) == expanded


def test_an_unset_variable_is_one_line_naming_it_and_the_argument() -> None:
    with pytest.raises(UsageError) as caught:
        expand.command(["python", "t.py", "--out=$NOPE/x"], ENV)
    assert str(caught.value) == (
        "command argument '--out=$NOPE/x': $NOPE is not set in the training's environment "
        "(set it in the spec's env, or write $$ for a literal $)"
    )
    assert caught.value.exit_code == 2


@pytest.mark.parametrize(
    ("word", "said"),
    [("$(id)", "'$(i' is not $NAME"), ("${D", "'${D' has no closing }"), ("$1", "'$1' is not")],
)
def test_a_dollar_of_no_variable_is_refused(word: str, said: str) -> None:
    with pytest.raises(UsageError) as caught:
        expand.command(["python", word], ENV)
    assert str(caught.value).startswith(f"command argument {word!r}: {said}")


STEP = {
    "SLURM_JOB_ID": "42",
    "SLURM_JOB_NODELIST": "node-[1-2]",
    "SLURM_NODEID": "1",
    "SLURMD_NODENAME": "node-2",
    "SLURM_GPUS_ON_NODE": "2",
    "RUN": "7",
}


def test_launch_expands_the_command_before_the_launcher_goes_around_it(tmp_path: Path) -> None:
    """The wrapper's own path: the training's environment (slurmpre's variables on top
    of the job's), the command expanded from it, then torchrun and resume_arg around it;
    the resume path is never expanded."""
    opts = parse_args([
        "--checkpoint-dir", str(tmp_path), "--resume-arg=--resume", "--",
        "python", "train.py", "--output_dir", "$SLURMPRE_CHECKPOINT_DIR",
        "--tag=${SLURMPRE_JOB_TAG}-$RUN", "$$HOME",
    ])  # fmt: skip
    resume = str(tmp_path / "$x" / "step-00000001")
    choice = Choice("42", 0, resume, 1, ("node-1", "node-2"), 4, None, "10.0.0.7:20042", 1.0)
    argv, env = launch(opts, read_job_env(STEP), choice, STEP, tmp_path)
    assert env["SLURMPRE_CHECKPOINT_DIR"] == str(tmp_path)
    assert argv[:3] == ["python", "-m", "torch.distributed.run"]
    assert argv[argv.index("--") + 1 :] == [
        "train.py", "--output_dir", str(tmp_path), "--tag=42-7", "$HOME", "--resume", resume,
    ]  # fmt: skip


class Nodes(FakeSlurm):
    """What one attempt of node 0 asks Slurm: its address, and (giving up) no requeue."""

    def __init__(self) -> None:
        self.flags: list[tuple[str, bool]] = []

    def nodes(self, names: Sequence[str] = ()) -> list[NodeInfo]:
        return [NodeInfo(n, "ALLOCATED", frozenset(), None, ("preemptible",)) for n in names]

    def set_requeue(self, job_id: str, requeue: bool) -> None:
        self.flags.append((job_id, requeue))


DUMP = (
    "import json, os, sys; json.dump(sys.argv[1:], "
    "open(os.path.join(os.environ['SLURMPRE_CHECKPOINT_DIR'], 'argv.json'), 'w'))"
)
NODE_0 = {
    **os.environ,
    "SLURM_JOB_ID": "42",
    "SLURM_JOB_NODELIST": "node-1",
    "SLURMD_NODENAME": "node-1",
    "SLURM_NODEID": "0",
    "SLURM_RESTART_COUNT": "0",
    "RUN": "7",
}


def test_the_training_gets_its_arguments_expanded_on_the_node(tmp_path: Path) -> None:
    from slurmpre.job.start.run import run_attempt

    opts = parse_args([
        "--launcher", "plain", "--no-watch", "--checkpoint-dir", str(tmp_path), "--",
        sys.executable, "-c", DUMP, "$SLURMPRE_CHECKPOINT_DIR", "${RUN}x", "$$HOME", "a *",
        "$RANK",
    ])  # fmt: skip
    assert run_attempt(opts, NODE_0, client=Nodes(), say=lambda _: None) == 0
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert argv == [str(tmp_path), "7x", "$HOME", "a *", "0"]  # RANK: plain sets it


def test_a_local_dir_whose_variable_is_unset_is_one_line_of_the_wrappers_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The tier says it through its logger, as the job side does; the wrapper writes both as
    its own lines: its prefix, on its standard error."""
    from slurmpre.job.start.run import run_attempt

    opts = parse_args(["--launcher", "plain", "--no-watch", "--checkpoint-dir", str(tmp_path),
                       "--local-dir=$NOPE/x", "--", sys.executable, "-c", "pass"])  # fmt: skip
    env = {k: v for k, v in NODE_0.items() if k != "NOPE"}
    assert run_attempt(opts, env, client=Nodes()) == 0
    said = capsys.readouterr().err.splitlines()
    assert said[0] == (
        "slurmpre[42.0 node 0 node-1]: local_dir = '$NOPE/x': $NOPE is not set on this node: "
        "checkpoints go straight to the checkpoint folder"
    )
    assert said[1] == "slurmpre[42.0 node 0 node-1]: no complete checkpoint yet: starting fresh"


def test_an_unset_variable_stops_the_run_at_once_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Node 0 finds it before it chooses: the run gives up (recorded, made
    non-requeueable: no restart builds the same command again), nothing trains, exit 2."""
    from slurmpre.job.start import run

    slurm = Nodes()
    monkeypatch.setattr(run, "CommandLineSlurm", lambda: slurm)
    argv = ["--launcher", "plain", "--no-watch", "--checkpoint-dir", str(tmp_path), "--",
            sys.executable, "-c", DUMP, "--output_dir", "$OUTPUT_DIR"]  # fmt: skip
    assert run.main(argv, NODE_0) == 2
    line = (
        "slurmpre run: error: command argument '$OUTPUT_DIR': $OUTPUT_DIR is not set in the "
        "training's environment (set it in the spec's env, or write $$ for a literal $)"
    )
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == line and err.count("OUTPUT_DIR is not set") == 1, err
    assert slurm.flags == [("42", False)]
    records = Ledger(tmp_path).records()
    assert [r.EVENT for r in records] == ["gave_up"]
    assert records[0].why == line.removeprefix("slurmpre run: error: ")  # type: ignore[attr-defined]
    assert not FolderLayout(tmp_path).choice("42", "0").exists()  # nothing chosen
    assert not (tmp_path / "argv.json").exists()  # nothing trained
