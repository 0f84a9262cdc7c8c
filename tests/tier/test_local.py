"""The node-local tier on one node: where it is, when it is refused (one line, and the
checkpoint folder as without it), and what `slurmpre.checkpoint()` writes there."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from slurmpre import environment
from slurmpre.api import saving
from slurmpre.folder import checkpoints
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import Saved
from slurmpre.tier import local


@pytest.fixture
def shm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A node-local root on another volume than the checkpoint folder (as told)."""
    root = tmp_path / "node-local"
    root.mkdir()
    real = Path.stat

    def stat(self: Path, *a: object, **k: object) -> os.stat_result:
        st = real(self, *a, **k)  # type: ignore[arg-type]
        if self == root:
            fields = list(st)
            fields[2] = st.st_dev + 1  # st_dev
            return os.stat_result(fields)
        return st

    monkeypatch.setattr(Path, "stat", stat)
    return root


def _prepare(setting: str, env: dict[str, str], folder: Path, attempt: str = "41-0") -> Path:
    """The attempt's folder on node "n1" (its lock let go at once)."""
    held = local.prepare(setting, env, folder, "n1", attempt)
    assert held is not None
    held.release()
    return held.run


def test_off_is_none_and_auto_takes_the_nodes_folder(shm: Path, tmp_path: Path) -> None:
    folder = tmp_path / "ckpt"
    folder.mkdir()
    assert local.prepare("off", {}, folder, "n1", "41-0") is None
    run = _prepare("auto", {environment.NODE_LOCAL_DIR: str(shm)}, folder)
    assert run == local.run_dir(shm, folder, "n1", "41-0") and run.is_dir()
    assert all(p.stat().st_mode & 0o777 == 0o700 for p in (run, *run.parents[:3]))
    assert _prepare("${SCRATCH}", {"SCRATCH": str(shm)}, folder) == run  # read on the node


def test_each_node_and_attempt_has_a_folder_and_a_dead_attempts_goes(
    shm: Path, tmp_path: Path
) -> None:
    """A root shared by mistake never mixes two nodes' parts; a step beside this one (its
    lock held) keeps its folder, and what a killed attempt left in RAM goes."""
    folder = tmp_path / "ckpt"
    folder.mkdir()
    a = local.prepare(str(shm), {}, folder, "n1", "41-0")
    b = local.prepare(str(shm), {}, folder, "n2", "41-0")
    assert a is not None and b is not None and a.run != b.run
    (a.run / "step-00000003").mkdir()
    beside = local.prepare(str(shm), {}, folder, "n1", "41-0.1")
    assert beside is not None and a.run.is_dir()  # a's wrapper lives: kept
    a.release()
    later = local.prepare(str(shm), {}, folder, "n1", "42-0")
    assert later is not None and not a.run.exists() and beside.run.is_dir()
    for held in (b, beside, later):
        held.release()


def test_a_relative_or_network_local_dir_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(local.Unusable, match="is not an absolute path"):
        local.prepare("$TMPDIR", {"TMPDIR": ""}, tmp_path, "n1", "1-0")
    monkeypatch.setattr(local, "fs_type", lambda path: "nfs4")
    with pytest.raises(local.Unusable, match="is on a nfs4 filesystem, not on the node"):
        local.prepare(str(tmp_path), {}, tmp_path / "ckpt", "n1", "1-0")


@pytest.mark.parametrize(
    ("setting", "env", "said"),
    [
        ("/no/such/folder", {}, "cannot be used: No such file or directory"),
        ("$NOPE/ckpt", {}, "$NOPE is not set on this node"),
        ("SAME", {}, "is on the volume of the checkpoint folder"),
        ("FILE", {}, "is not a folder"),
    ],
)
def test_a_folder_that_cannot_be_used_is_one_line(
    tmp_path: Path, setting: str, env: dict[str, str], said: str
) -> None:
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (tmp_path / "a-file").write_text("x")
    setting = {"SAME": str(tmp_path), "FILE": str(tmp_path / "a-file")}.get(setting, setting)
    with pytest.raises(local.Unusable) as caught:
        local.prepare(setting, env, folder, "n1", "41-0")
    assert said in str(caught.value) and "\n" not in str(caught.value)


def test_a_full_folder_is_refused(
    shm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local, "free_bytes", lambda path: 10**6)
    with pytest.raises(local.Unusable, match="is full \\(1 MB free\\)"):
        local.prepare(str(shm), {}, tmp_path, "n1", "41-0")


@pytest.mark.skipif(os.geteuid() != 0, reason="makes a folder another user owns")
def test_a_folder_another_user_made_first_is_refused(shm: Path, tmp_path: Path) -> None:
    trap = shm / f"slurmpre-{os.geteuid()}"
    trap.mkdir()
    os.chown(trap, 65534, 65534)
    with pytest.raises(local.Unusable, match="is not a folder of this user's"):
        local.prepare(str(shm), {}, tmp_path, "n1", "41-0")


def test_a_link_in_place_of_the_users_folder_is_refused(shm: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (shm / f"slurmpre-{os.geteuid()}").symlink_to(elsewhere)
    with pytest.raises(local.Unusable, match="is not a folder of this user's"):
        local.prepare(str(shm), {}, tmp_path, "n1", "41-0")
    assert list(elsewhere.iterdir()) == []


def _env(folder: Path, run: Path) -> dict[str, str]:
    return {
        environment.CHECKPOINT_DIR: str(folder),
        environment.LOCAL_DIR: str(run),
        environment.LOCAL_NODE: "0/1",
        environment.JOB_TAG: "41",
        environment.RESTART_COUNT: "0",
        "SLURM_RESTART_COUNT": "0",
    }


def test_checkpoint_writes_on_the_node_and_seals_it_there(
    shm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "ckpt"
    folder.mkdir()
    Ledger(folder).ensure()
    run = _prepare(str(shm), {}, folder)
    for key, value in _env(folder, run).items():
        monkeypatch.setenv(key, value)
    with saving.checkpoint(7) as where:
        assert where.is_relative_to(run)
        (where / "weights.bin").write_bytes(b"w" * 1000)
        (where / "sub").mkdir()
        (where / "sub" / "opt.bin").write_bytes(b"o" * 10)
    (part,) = local.parts(run)
    assert part.step == 7 and part.files == {"sub/opt.bin": 10, "weights.bin": 1000}
    assert part.meta["job"] == "41" and part.meta["after_notice"] is False
    # Not in the checkpoint folder yet: the flush commits it there.
    assert checkpoints.latest(folder).checkpoint is None
    (saved,) = [r for r in Ledger(folder).records() if isinstance(r, Saved)]
    assert saved.step == 7 and saved.path == str(part.path)


def test_a_part_whose_files_changed_is_no_part(shm: Path, tmp_path: Path) -> None:
    run = shm / "run"
    run.mkdir()
    written = local.incoming(run, 3, "t")
    written.mkdir()
    (written / "a").write_bytes(b"abc")
    sealed = local.seal(written, run, 3, {"job": "1"})
    assert [p.step for p in local.parts(run)] == [3]
    (sealed / "a").write_bytes(b"abcd")
    assert local.parts(run) == []
    meta = json.loads((sealed / local.PART).read_text())
    assert meta["files"] == {"a": 3}


def test_a_save_that_would_not_fit_goes_to_the_checkpoint_folder(
    shm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "ckpt"
    folder.mkdir()
    run = _prepare(str(shm), {}, folder)
    for key, value in _env(folder, run).items():
        monkeypatch.setenv(key, value)
    with saving.checkpoint(1) as where:
        (where / "w").write_bytes(b"x" * 5000)
    monkeypatch.setattr(local, "free_bytes", lambda path: local.MIN_FREE_MB * 10**6 + 100)
    with saving.checkpoint(2) as where:
        assert where.is_relative_to(folder)
        (where / "w").write_bytes(b"x" * 5000)
    assert checkpoints.latest(folder).checkpoint.step == 2  # type: ignore[union-attr]
    err = capfd.readouterr().err
    assert "slurmpre: step 2 goes to the checkpoint folder: the node-local folder" in err
    assert [p.step for p in local.parts(run)] == [1]


def test_prune_keeps_the_newest_and_the_busy(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    for step in range(1, 6):
        written = local.incoming(run, step, "t")
        written.mkdir()
        (written / "a").write_bytes(b"x")
        local.seal(written, run, step, {})
    assert local.prune(run, keep=2, busy=frozenset({2})) == [1, 3]
    assert [p.step for p in local.parts(run)] == [2, 4, 5]


def test_a_save_to_another_folder_than_the_jobs_goes_there_directly(
    shm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, other = tmp_path / "ckpt", tmp_path / "elsewhere"
    folder.mkdir()
    run = _prepare(str(shm), {}, folder)
    for key, value in _env(folder, run).items():
        monkeypatch.setenv(key, value)
    with saving.checkpoint(3, folder=other) as where:
        assert where.is_relative_to(other)  # the job's flush would never put it there
        (where / "w").write_bytes(b"x")
    assert checkpoints.latest(other).checkpoint.step == 3  # type: ignore[union-attr]
    assert local.parts(run) == []
