"""Files slurmpre creates are owner-only whatever the umask, or group-shared when asked."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import slurmpre
from slurmpre import environment
from slurmpre.errors import CheckpointError, UsageError
from slurmpre.folder import access
from slurmpre.folder.checkpoints import writing
from slurmpre.folder.ledger import Choice, Ledger
from slurmpre.job.start.args import parse_args
from slurmpre.job.watch.notice import Notice, write_notice
from slurmpre.login.render import launch_argv, render
from slurmpre.login.spec import SpecError, validate

from tests.records import record


@pytest.fixture
def umask() -> Iterator[object]:
    """Set the process umask for one test (``umask(0o000)``), and restore it."""
    old = os.umask(0o022)
    os.umask(old)
    yield os.umask
    os.umask(old)


def modes(root: Path) -> dict[str, int]:
    """Every entry below ``root`` (itself included) -> its permission bits."""
    out = {".": stat.S_IMODE(root.stat().st_mode)}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            out[str(path.relative_to(root))] = stat.S_IMODE(path.lstat().st_mode)
    return out


def expected(found: dict[str, int], root: Path, mode: access.Access) -> dict[str, int]:
    """Checkpoints by the access; the job's own .slurmpre read-only for the group at most,
    and what a job acts on in it (locks, choice, notice, marks) its owner's alone."""

    def one(name: str) -> int:
        if name == ".slurmpre":
            return mode.meta_mode
        if name == ".slurmpre/attempts.jsonl":
            return mode.ledger_mode
        if name.startswith(".slurmpre/"):
            return access.CONTROL_MODE
        if name.endswith("/.slurmpre-complete"):  # the owner's word: never the group's to write
            return mode.file_mode & ~0o022
        return mode.dir_mode if (root / name).is_dir() else mode.file_mode

    return {name: one(name) for name in found}


def choice(folder: Path) -> Choice:
    return Choice("7", 0, str(folder / "step-00000001"), 1, ("n1",), 1, None, "h:1", 1.0)


def everything(folder: Path, mode: access.Access, monkeypatch: pytest.MonkeyPatch) -> None:
    """What one attempt writes: the ledger and its lock, the choice, a notice, and a
    checkpoint through slurmpre.checkpoint with its commit record."""
    access.make_dirs(folder, mode)  # as `slurmpre submit` does
    ledger = Ledger(folder, access=mode)
    ledger.ensure()
    ledger.append(record({"event": "start", "job": "7", "attempt": 0}))
    ledger.publish(choice(folder))
    write_notice(folder / ".slurmpre" / "notice-7-0.json", Notice("drain", "n1", None, 1.0))
    monkeypatch.setenv(environment.FILE_ACCESS, mode.name)
    monkeypatch.setenv("SLURMPRE_JOB_TAG", "7")
    monkeypatch.setenv("SLURMPRE_CHECKPOINT_DIR", str(folder))  # names listening-7-0
    for key in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "SLURMPRE_IN_PLACE",
                "SLURMPRE_RESTART_COUNT", "SLURM_RESTART_COUNT"):  # fmt: skip
        monkeypatch.delenv(key, raising=False)
    slurmpre.preemption_requested(env=dict(os.environ))  # a fresh gate: it marks listening
    with slurmpre.checkpoint(1, folder) as path:
        (path / "weights.pt").write_bytes(b"w")
        (path / "sub").mkdir()
        (path / "sub" / "shard").write_bytes(b"s")


def test_owner_only_under_a_world_writable_umask(
    tmp_path: Path, umask: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    os.umask(0o000)
    folder = tmp_path / "ckpt"
    everything(folder, access.OWNER, monkeypatch)
    found = modes(folder)
    assert "step-00000001" in found and ".slurmpre/ledger.lock" in found
    assert ".slurmpre/choice-7-0.json" in found and ".slurmpre/listening-7-0" in found
    # The user's own files inside a checkpoint keep the umask's mode; the folder
    # around them is 0700, which is what keeps them private.
    mine = {"step-00000001/weights.pt", "step-00000001/sub", "step-00000001/sub/shard"}
    ours = {k: v for k, v in found.items() if k not in mine}
    assert ours == expected(ours, folder, access.OWNER)


def test_group_shares_under_a_strict_umask(
    tmp_path: Path, umask: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    os.umask(0o077)
    folder = tmp_path / "ckpt"
    everything(folder, access.GROUP, monkeypatch)
    found = modes(folder)
    assert ".slurmpre/listening-7-0" in found
    mine = {"step-00000001/weights.pt", "step-00000001/sub", "step-00000001/sub/shard"}
    ours = {k: v for k, v in found.items() if k not in mine}
    assert ours == expected(ours, folder, access.GROUP)


def test_an_existing_folder_keeps_its_mode_but_the_ledger_folder_is_set(
    tmp_path: Path, umask: object
) -> None:
    os.umask(0o000)
    folder = tmp_path / "ckpt"
    (folder / ".slurmpre").mkdir(parents=True, mode=0o755)
    folder.chmod(0o755)
    Ledger(folder).ensure()
    with writing(folder, 3) as path:
        (path / "w").write_bytes(b"1")
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755
    assert stat.S_IMODE((folder / ".slurmpre").stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "step-00000003").stat().st_mode) == 0o700


def test_an_old_world_readable_ledger_is_closed_on_the_next_record(
    tmp_path: Path, umask: object
) -> None:
    ledger = Ledger(tmp_path)
    ledger.ensure()
    ledger.path.write_text("")
    ledger.path.chmod(0o644)
    ledger.append(record({"event": "start"}))
    assert stat.S_IMODE(ledger.path.stat().st_mode) == 0o600


def test_the_spec_key_reaches_the_wrapper_and_the_log_folder() -> None:
    spec = validate({"name": "j", "command": "x", "file_access": "group"}, user="u", python="/py")
    argv = launch_argv(spec)
    assert "--file-access=group" in argv
    assert parse_args(argv[3:]).file_access == access.GROUP
    assert 'mkdir -p -m 1770 -- "$SLURMPRE_LOG_DIR"' in render(spec)
    plain = validate({"name": "j", "command": "x"}, user="u", python="/py")
    assert not any(a.startswith("--file-access") for a in launch_argv(plain))
    assert parse_args(launch_argv(plain)[3:]).file_access == access.OWNER
    assert 'mkdir -p -m 0700 -- "$SLURMPRE_LOG_DIR"' in render(plain)


@pytest.mark.parametrize("value", ["world", "", 1, "Group"])
def test_a_bad_file_access_is_refused(value: object) -> None:
    with pytest.raises(SpecError, match=r"file_access = .*: must be 'owner' or 'group'"):
        validate({"name": "j", "command": "x", "file_access": value}, user="u", python="/py")


def test_the_wrapper_refuses_a_bad_file_access() -> None:
    with pytest.raises(UsageError, match="--file-access"):
        parse_args(["--checkpoint-dir=/c", "--file-access=world", "--", "x"])


def test_a_bad_access_in_the_environment_fails_the_checkpoint_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(environment.FILE_ACCESS, "everyone")
    with pytest.raises(CheckpointError, match="SLURMPRE_FILE_ACCESS = 'everyone'"):  # noqa: SIM117
        with slurmpre.checkpoint(1, tmp_path):
            pass
    assert not any(tmp_path.iterdir())
