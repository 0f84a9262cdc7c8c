"""What submit checks before a job waits for its nodes, and that `submit --dry-run` and
`--test-only` check the same: the nodes' python has what the launcher runs; a deadline is
ahead, and one without a zone is pinned in the login node's. No cluster: a fake Slurm
client, and a fake `sbatch` on PATH for the command line."""

from __future__ import annotations

import json
import os
import shlex
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import slurmpre
from slurmpre import cmd
from slurmpre.errors import UsageError
from slurmpre.launchers import Launcher
from slurmpre.login import submit as submitting
from slurmpre.login.render import launch_argv, render
from slurmpre.login.spec import load

from tests.conftest import slurmpre_cli
from tests.test_resuming import Submits, ledger_of
from tests.test_submit import toml_path, write_spec


def python_without_site(tmp_path: Path) -> Path:
    """A python that imports slurmpre (this checkout) but sees no site-packages: no
    torch, no accelerate, as a venv made without them."""
    root = Path(slurmpre.__file__).resolve().parent.parent
    exe = tmp_path / "bare" / "bin" / "python"
    exe.parent.mkdir(parents=True)
    exe.write_text(
        "#!/bin/sh\n"
        f'PYTHONPATH={shlex.quote(str(root))} exec {shlex.quote(sys.executable)} -S "$@"\n'
    )
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def job_spec(
    tmp_path: Path, *lines: str, python: Path = Path(sys.executable), launcher: str = "plain"
) -> Path:
    return write_spec(
        tmp_path / "job.toml",
        [
            'name = "exp"',
            'command = ["train.py"]',
            f"checkpoint_dir = {toml_path(tmp_path / 'ck')}",
            f"python = {toml_path(python)}",
            f'launcher = "{launcher}"',
            *lines,
        ],
    )


# -- the nodes' python has what the launcher runs -------------------------------------


@pytest.mark.parametrize(
    ("launcher", "module"), [(Launcher.TORCHRUN, "torch"), (Launcher.ACCELERATE, "accelerate")]
)
def test_a_python_without_the_launchers_module_is_refused_in_one_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, launcher: Launcher, module: str
) -> None:
    python = python_without_site(tmp_path)
    runs: list[list[str]] = []
    real = cmd.run

    def counted(argv: list[str], **kw: object) -> object:
        runs.append(argv)
        return real(argv, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(cmd, "run", counted)
    with pytest.raises(UsageError) as info:
        submitting.check_python(str(python), cwd=tmp_path, launcher=launcher)
    assert str(info.value) == (
        f"python = '{python}' has no {module}, which launcher = '{launcher.value}' needs: "
        f"pip install {module} into that environment, or set python to the interpreter "
        "that has it"
    )
    assert len(runs) == 1  # slurmpre and the launcher's module: one interpreter start
    runs.clear()
    submitting.check_python(str(python), cwd=tmp_path, launcher=Launcher.PLAIN)
    assert len(runs) == 1


def test_every_launcher_names_what_it_needs() -> None:
    assert {launcher: launcher.needs for launcher in Launcher} == {
        Launcher.TORCHRUN: "torch", Launcher.ACCELERATE: "accelerate", Launcher.PLAIN: None,
    }  # fmt: skip


def test_a_python_with_the_launchers_module_passes(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    submitting.check_python(sys.executable, cwd=tmp_path, launcher=Launcher.TORCHRUN)


def test_submit_checks_the_specs_launcher(tmp_path: Path) -> None:
    spec = load(job_spec(tmp_path, python=python_without_site(tmp_path), launcher="torchrun"), ())
    client = Submits()
    with pytest.raises(UsageError, match=r"has no torch, which launcher = 'torchrun' needs"):
        submitting.submit(spec, client)
    assert client.scripts == []


# -- a deadline: pinned in the login node's zone, refused when past ----------------------


@pytest.fixture
def tokyo(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The login node's zone: UTC+9 (a POSIX TZ, no tz database needed)."""
    monkeypatch.setenv("TZ", "JST-9")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.usefixtures("tokyo")
@pytest.mark.parametrize(
    ("written", "carried"),
    [
        ("2036-12-06T09:00", "2036-12-06T09:00:00+09:00"),
        ("2036-12-06 09:00:30", "2036-12-06T09:00:30+09:00"),
        ("2036-12-06T09:00Z", "2036-12-06T09:00Z"),
        ("2036-12-06T09:00-05:00", "2036-12-06T09:00-05:00"),
        ("8h", "8h"),
    ],
)
def test_a_deadline_without_a_zone_reaches_the_job_as_an_instant(
    tmp_path: Path, written: str, carried: str
) -> None:
    spec = load(job_spec(tmp_path, f'deadline = "{written}"', "total_steps = 10"), ())
    assert spec.deadline == written  # the spec keeps it as written, for its messages
    assert f"--deadline={carried}" in launch_argv(spec)
    assert f"--deadline={carried}" in render(spec)


@pytest.mark.usefixtures("tokyo")
def test_a_past_moment_is_named_as_written_and_beside_now_without_fresh(tmp_path: Path) -> None:
    spec = load(job_spec(tmp_path, 'deadline = "2020-01-01T00:00"', "total_steps = 10"), ())
    client = Submits()
    with pytest.raises(UsageError) as info:
        submitting.submit(spec, client)
    message = str(info.value)
    assert message.startswith(
        "deadline = '2020-01-01T00:00': 2020-01-01T00:00+09:00 is in the past (it is now 20"
    )
    assert message.endswith("): give a later one")
    assert "--fresh" not in message
    assert client.scripts == []


def test_a_duration_past_since_the_first_submission_suggests_fresh(tmp_path: Path) -> None:
    ledger_of(tmp_path / "ck", {"event": "submitted", "job": "41", "name": "exp"})
    spec = load(job_spec(tmp_path, 'deadline = "8h"', "total_steps = 10"), ())
    with pytest.raises(UsageError, match=r"counted from the run's first submission .* --fresh"):
        submitting.submit(spec, Submits())


# -- submit --dry-run (and --test-only) check what submit checks --------------------------


@pytest.fixture
def fake_sbatch(tmp_path: Path) -> dict[str, str]:
    """A PATH whose sbatch, squeue, sacct and scontrol only write down that they ran."""
    folder = tmp_path / "fakebin"
    folder.mkdir()
    for name in ("sbatch", "squeue", "sacct", "scontrol"):
        tool = folder / name
        tool.write_text(f'#!/bin/sh\necho "{name} $*" >> {shlex.quote(str(tmp_path))}/ran\n')
        tool.chmod(0o755)
    return {"PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


@pytest.mark.parametrize("flag", ["--dry-run", "--test-only"])
@pytest.mark.parametrize(
    ("lines", "python", "message"),
    [
        (['deadline = "2020-01-01T00:00"', "total_steps = 10"], None, "is in the past"),
        ([], Path("/nonexistent/bin/python"), "python = '/nonexistent/bin/python' cannot run"),
        ([], "bare", "has no torch, which launcher = 'torchrun' needs"),
    ],
)
def test_dry_run_refuses_what_submit_refuses(
    tmp_path: Path,
    fake_sbatch: dict[str, str],
    flag: str,
    lines: list[str],
    python: Path | str | None,
    message: str,
) -> None:
    if python == "bare":
        python = python_without_site(tmp_path)
    assert not isinstance(python, str)
    spec = job_spec(tmp_path, *lines, python=python or Path(sys.executable), launcher="torchrun")
    proc = slurmpre_cli("submit", str(spec), flag, env=fake_sbatch, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert message in line
    assert not (tmp_path / "ran").exists()  # no sbatch, not even --test-only


@pytest.mark.parametrize(
    "args", [["submit"], ["submit", "--dry-run"], ["sweep", "--grid", "env.LR=1,2"]]
)
def test_a_python_the_sandboxs_nodes_cannot_see_is_refused_by_the_command_line(
    tmp_path: Path,
    fake_sbatch: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
) -> None:
    """The command line asks the sandbox (`slurmpre.sandbox.seen.unseen`) before it
    submits anything: the login side, which never imports the sandbox, does not."""
    from slurmpre.cli import main
    from slurmpre.sandbox import seen

    def unseen(python: str, path: str) -> str:
        return f"python = {python!r} is not inside the sandbox's root"

    monkeypatch.setattr(seen, "unseen", unseen)
    monkeypatch.setenv("PATH", fake_sbatch["PATH"])
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    spec = job_spec(tmp_path)
    assert main([args[0], str(spec), *args[1:]]) == 2
    assert f"python = {sys.executable!r} is not inside" in capsys.readouterr().err
    assert not (tmp_path / "ran").exists()
    assert not (tmp_path / "ck").exists()


def test_dry_run_says_what_it_resumes_and_touches_nothing(
    tmp_path: Path, fake_sbatch: dict[str, str]
) -> None:
    spec = job_spec(tmp_path, 'deadline = "8h"', "total_steps = 10")
    state = tmp_path / "state"
    env = {**fake_sbatch, "XDG_STATE_HOME": str(state)}
    proc = slurmpre_cli("submit", str(spec), "--dry-run", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("#!/bin/bash")
    assert "starts at step 0: no complete checkpoint in the folder" in proc.stderr
    assert not (tmp_path / "ck").exists()  # no folder, no ledger
    assert not state.exists()  # no job index, no submission lock
    assert not (tmp_path / "ran").exists()  # no sbatch


def test_sweep_dry_run_checks_every_job_before_it_prints_one(
    tmp_path: Path, fake_sbatch: dict[str, str]
) -> None:
    spec = job_spec(tmp_path)
    args = ["sweep", str(spec), "--grid", "env.LR=1,2", "--dry-run"]
    proc = slurmpre_cli(*args, env=fake_sbatch, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("#!/bin/bash")
    past = ["--set", "deadline=2020-01-01T00:00", "--set", "total_steps=10"]
    proc = slurmpre_cli(*args, *past, env=fake_sbatch, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert "deadline = '2020-01-01T00:00': " in proc.stderr
    assert not (tmp_path / "ran").exists()


def test_dry_run_refuses_a_snapshot_past_its_limit_and_copies_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.test_code import git

    work = tmp_path / "repo"
    work.mkdir()
    git(work, "init", "-q")
    (work / "weights.pt").write_bytes(b"w" * 1_500_000)
    git(work, "add", "weights.pt")
    monkeypatch.chdir(work)
    spec = load(job_spec(tmp_path, 'snapshot = "git"', "snapshot_max_mb = 1"), ())
    with pytest.raises(UsageError, match=r"over snapshot_max_mb = 1 \(largest: weights.pt"):
        submitting.dry_run(spec, Submits())
    assert not (tmp_path / "ck").exists()
    spec = load(job_spec(tmp_path, 'snapshot = "git"', "snapshot_max_mb = 2"), ())
    assert submitting.dry_run(spec, Submits()).startswith("#!/bin/bash")
    assert not (tmp_path / "ck").exists()


def test_dry_run_refuses_a_checkpoint_folder_submit_could_not_create(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder\n")
    spec = load(job_spec(tmp_path), [f"checkpoint_dir={tmp_path}/file/ck"])
    said = (
        f"checkpoint_dir = '{tmp_path}/file/ck': cannot create it ({tmp_path}/file is not a folder)"
    )
    for check in (submitting.dry_run, submitting.submit):
        with pytest.raises(UsageError) as info:
            check(spec, Submits())
        assert str(info.value) == said


@pytest.mark.parametrize(
    ("command", "setup", "checked"),
    [
        (["python", "train.py"], [], True),
        (["python3.11", "train.py"], [], True),
        (["train.py"], [], True),  # torchrun from PATH: the spec's python's folder first
        (["python", "train.py"], ["module load pytorch"], False),  # another env may come first
        (["/opt/torch/bin/python", "train.py"], [], False),  # another interpreter runs it
    ],
)
def test_the_launchers_module_is_checked_where_the_specs_python_runs_it(
    tmp_path: Path, command: list[str], setup: list[str], checked: bool
) -> None:
    lines = [f"command = {json.dumps(command)}", f"setup = {json.dumps(setup)}"]
    path = job_spec(tmp_path, python=python_without_site(tmp_path), launcher="torchrun")
    text = path.read_text().replace('command = ["train.py"]\n', "")
    path.write_text(text + "\n".join(lines) + "\n")
    spec = load(path, ())
    if checked:
        with pytest.raises(UsageError, match=r"has no torch, which launcher = 'torchrun'"):
            submitting.check_interpreter(spec)
    else:
        submitting.check_interpreter(spec)  # slurmpre is checked (it imports it), torch not


class _Asked(Submits):
    """What each sbatch call was given on its command line."""

    def __init__(self) -> None:
        super().__init__()
        self.given: list[tuple[list[str], bool]] = []

    def submit(self, script: str, *, args: object = (), test_only: bool = False) -> str:
        self.given.append((list(args), test_only))  # type: ignore[call-overload]
        return super().submit(script, args=args, test_only=test_only)


def test_a_sweeps_check_and_test_only_give_sbatch_the_options_submit_gives(
    tmp_path: Path,
) -> None:
    """sbatch takes its command line over the script and over SBATCH_* variables: a check
    without slurmpre's options there would judge another job than the one submitted."""
    spec = load(job_spec(tmp_path, 'time = "4:00:00"'), ())
    asked = _Asked()
    submitting.check(spec, asked)
    submitting.test_only(spec, asked)
    submitting.submit(spec, asked)
    (checked, c_test), (tested, t_test), (submitted, s_test) = asked.given
    assert (c_test, t_test, s_test) == (True, True, False)
    assert "--time=4:00:00" in submitted and "--job-name=exp" in submitted
    assert checked == tested == submitted
