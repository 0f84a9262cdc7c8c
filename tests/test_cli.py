"""The command line as a user meets it: the real `python -m slurmpre`."""

from __future__ import annotations

from pathlib import Path

import pytest
from slurmpre import __version__
from slurmpre.cli import main
from slurmpre.errors import SlurmpreError

from tests.conftest import slurmpre_cli


def test_help_smoke() -> None:
    proc = slurmpre_cli("--help", check=True)
    assert "Run ML jobs on preemptible Slurm nodes" in proc.stdout
    assert "sandbox" in proc.stdout


def test_version() -> None:
    assert slurmpre_cli("--version", check=True).stdout == f"slurmpre, version {__version__}\n"


def test_unknown_command_is_a_usage_error() -> None:
    proc = slurmpre_cli("frobnicate")
    assert proc.returncode == 2
    assert "No such command 'frobnicate'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_bad_option_value_is_exit_2() -> None:
    proc = slurmpre_cli("sandbox", "up", "--nodes", "three")
    assert proc.returncode == 2
    assert "'three' is not a valid integer" in proc.stderr


def test_domain_error_is_one_line_exit_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def boom(*_: object, **__: object) -> None:
        raise SlurmpreError("the sky fell on node n1")

    monkeypatch.setattr("slurmpre.sandbox.cluster.Sandbox.down", boom)
    assert main(["sandbox", "down"]) == 1
    assert capsys.readouterr().err == "slurmpre: error: the sky fell on node n1\n"


def test_unexpected_error_is_exit_3_with_traceback_only_under_debug(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def boom(*_: object, **__: object) -> None:
        raise RuntimeError("bug")

    monkeypatch.setattr("slurmpre.sandbox.cluster.Sandbox.down", boom)
    assert main(["sandbox", "down"]) == 3
    err = capsys.readouterr().err
    assert err.startswith("slurmpre: error: unexpected RuntimeError: bug\n")
    assert "Traceback" not in err
    assert main(["--debug", "sandbox", "down"]) == 3
    assert "Traceback" in capsys.readouterr().err


def test_ctrl_c_is_130(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def interrupted(*_: object, **__: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("slurmpre.sandbox.cluster.Sandbox.down", interrupted)
    assert main(["sandbox", "down"]) == 130


def test_sandbox_shape_errors_are_one_line_exit_2() -> None:
    proc = slurmpre_cli("sandbox", "up", "--nodes", "2", "--preemptible", "3")
    assert proc.returncode == 2
    assert proc.stderr == "slurmpre: error: --preemptible 3 is larger than --nodes 2\n"


@pytest.mark.parametrize(
    ("spec_text", "args", "message"),
    [
        ('name = "a"\ncommand = "true"\nenv = "oops"\n', ["--set", "env.A=1"], "env = 'oops'"),
        ('name = "a"\ncommand = ' + "[" * 5000 + "]" * 5000 + "\n", [], "nested too deeply"),
        ('name = "a"\ncommand = "true"\n', ["-o", "/nonexistent/dir/x.sh"], "cannot write"),
        ('name = "a"\ncommand = "true"\n', ["-o", "/proc/version"], "cannot write"),
    ],
)
def test_bad_input_to_render_is_one_line_exit_2_never_3(
    tmp_path: Path, spec_text: str, args: list[str], message: str
) -> None:
    spec = tmp_path / "s.toml"
    spec.write_text(spec_text)
    proc = slurmpre_cli("render", str(spec), *args)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr


def test_a_symlink_loop_in_a_checkpoint_folder_is_passed_over(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    proc = slurmpre_cli("ckpt", "latest", str(tmp_path))
    assert proc.returncode == 1
    assert proc.stderr.strip() == f"slurmpre: error: no complete checkpoint under {str(tmp_path)!r}"


def test_run_help_describes_every_option() -> None:
    from slurmpre.job.start.args import parse_args

    proc = slurmpre_cli("run", "--help")
    assert proc.returncode == 0 and proc.stdout.startswith("usage: slurmpre run [options] --")
    options = [o for o in proc.stdout.split() if o.startswith("--") and o != "--"]
    for flag in (
        "--launcher", "--checkpoint-dir", "--nproc-per-node", "--resume-arg", "--agree-timeout",
        "--poll-interval", "--window", "--time-warning", "--safety-margin", "--drain-reason",
        "--notice-signal", "--no-watch", "--file-access",
    ):  # fmt: skip
        assert flag in options, flag
    # Each option's entry (its line and the indented ones under it) says what it does.
    entries: dict[str, str] = {}
    current = ""
    for line in proc.stdout.split("options:")[1].splitlines():
        if line.startswith("  -"):
            current = line.split()[0].rstrip(",")
            entries[current] = line
        elif current:
            entries[current] += " " + line
    for flag, text in entries.items():
        words = [w for w in text.split() if w.isalpha() and w.islower()]
        assert len(words) >= 3, f"{flag} has no description: {text!r}"
    assert parse_args(["--checkpoint-dir=/c", "--", "x"]).launcher == "torchrun"


def test_a_path_longer_than_the_file_system_holds_is_bad_input_not_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A name of 300 bytes made Path.is_dir() raise ENAMETOOLONG: exit 3 (#35)."""
    from slurmpre.cli import main

    assert main(["status", "j", "--checkpoint-dir", str(tmp_path / ("z" * 300))]) == 2
    err = capsys.readouterr().err
    assert "File name too long" in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_path_this_user_may_not_reach_is_bad_input_not_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`status --checkpoint-dir /root/x/ckpt` by another user: EACCES on the ledger exited 3
    ("unexpected PermissionError"); it is one line naming the path, and exit 2. (Simulated:
    the tests run as root, who may reach anything.)"""
    from slurmpre.cli import main

    folder = tmp_path / "theirs"
    real = Path.is_file

    def is_file(self: Path) -> bool:
        if self.is_relative_to(folder):
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "is_file", is_file)
    assert main(["status", "j", "--checkpoint-dir", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "unexpected" not in err
    assert f"'{folder}/.slurmpre/attempts.jsonl': Permission denied (uid" in err
