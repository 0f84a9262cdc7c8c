"""The resolver over every format it knows, with partial, corrupt and racing cases."""

from __future__ import annotations

import json
import os
import random
import threading
import zipfile
from pathlib import Path

import pytest
from slurmpre.errors import CheckpointError
from slurmpre.folder import checkpoints as ck
from slurmpre.folder.checkpoints import Format, fresh_incoming, latest, list_all, writing

from tests.conftest import DATA, slurmpre_cli

HOSTILE = "ckpt 'q' \"dq\" $(x) `y`; é中 "


def slurmpre_ckpt(folder: Path, step: int, files: dict[str, bytes] | None = None) -> Path:
    with writing(folder, step) as path:
        for name, data in (files or {"model.pt": b"weights" * 10}).items():
            (path / name).parent.mkdir(parents=True, exist_ok=True)
            (path / name).write_bytes(data)
    return folder / ck.step_dir_name(step)


# A real .metadata, written by torch.distributed.checkpoint.save (torch 2.13) with one
# shard: it names __0_0.distcp inside its pickle.
DCP_METADATA = (DATA / "torch-2.13" / "dcp-one-shard.metadata").read_bytes()


def dcp(folder: Path, name: str, *, complete: bool = True, shard: bool = True) -> Path:
    path = folder / name
    path.mkdir(parents=True)
    if shard:
        (path / "__0_0.distcp").write_bytes(b"x" * 100)
    if complete:
        (path / ".metadata").write_bytes(DCP_METADATA)
    return path


def hf(folder: Path, step: int, *, state: str | None = "{}", weights: bool = True) -> Path:
    path = folder / f"checkpoint-{step}"
    path.mkdir(parents=True)
    if weights:
        (path / "model.safetensors").write_bytes(b"w")
    if state is not None:
        (path / "trainer_state.json").write_text(state)
    return path


def torch_zip(path: Path, *, whole: bool = True) -> Path:
    """What torch.save writes: a zip archive holding data.pkl (its directory last)."""
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("archive/data.pkl", b"x" * 1000)
    if not whole:
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    return path


def lightning(folder: Path, name: str, *, whole: bool = True) -> Path:
    return torch_zip(folder / name, whole=whole)


def test_empty_folder_has_no_checkpoint(tmp_path: Path) -> None:
    assert latest(tmp_path).checkpoint is None


def test_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="does not exist"):
        latest(tmp_path / "nope")


def test_slurmpre_commit_is_resolved_and_partial_newer_is_passed_over(tmp_path: Path) -> None:
    good = slurmpre_ckpt(tmp_path, 10)
    partial = tmp_path / ck.step_dir_name(20)
    partial.mkdir()
    (partial / "model.pt").write_bytes(b"half")
    found = latest(tmp_path)
    assert found.checkpoint is not None
    assert found.checkpoint.path == good and found.checkpoint.step == 10
    assert found.checkpoint.format is Format.SLURMPRE
    assert [s.path for s in found.skipped] == [partial]
    assert "no completion mark" in found.skipped[0].reason


def test_corrupt_marker_and_truncated_file_fall_back(tmp_path: Path) -> None:
    slurmpre_ckpt(tmp_path, 1)
    truncated = slurmpre_ckpt(tmp_path, 2)
    (truncated / "model.pt").write_bytes(b"short")
    bad_marker = slurmpre_ckpt(tmp_path, 3)
    (bad_marker / ck.MARKER).write_text("{not json")
    found = latest(tmp_path)
    assert found.checkpoint is not None and found.checkpoint.step == 1
    reasons = [s.reason for s in found.skipped]
    assert reasons[0] == f"corrupt: {ck.MARKER} is unreadable"
    assert reasons[1] == "corrupt: model.pt is 5 bytes, the marker says 70"


def test_dcp_folders(tmp_path: Path) -> None:
    dcp(tmp_path, "step_100")
    dcp(tmp_path, "step_200", complete=False)
    empty_meta = dcp(tmp_path, "step_300")
    (empty_meta / ".metadata").write_bytes(b"")
    found = latest(tmp_path)
    assert found.checkpoint is not None
    assert (found.checkpoint.step, found.checkpoint.format) == (100, Format.DCP)
    assert [s.reason for s in found.skipped] == [
        "corrupt: .metadata is empty",
        "partial: no completion mark (.metadata)",
    ]


def test_hf_trainer_folders(tmp_path: Path) -> None:
    hf(tmp_path, 500)
    hf(tmp_path, 1000, state="{trunc")
    hf(tmp_path, 1500, weights=False)
    hf(tmp_path, 2000, state=None)
    found = latest(tmp_path)
    assert found.checkpoint is not None and found.checkpoint.path.name == "checkpoint-500"
    assert found.checkpoint.format is Format.HF
    assert [s.path.name for s in found.skipped] == [
        "checkpoint-2000",
        "checkpoint-1500",
        "checkpoint-1000",
    ]


def test_hf_steps_order_numerically_not_by_name(tmp_path: Path) -> None:
    hf(tmp_path, 900)
    hf(tmp_path, 10000)
    found = latest(tmp_path)
    assert found.checkpoint is not None and found.checkpoint.step == 10000


def test_deepspeed_latest_tag(tmp_path: Path) -> None:
    for step in (10, 20, 30):
        d = tmp_path / f"global_step{step}"
        d.mkdir()
        torch_zip(d / "mp_rank_00_model_states.pt")
    (tmp_path / "latest").write_text("global_step20")
    found = latest(tmp_path)
    assert found.checkpoint is not None and found.checkpoint.path.name == "global_step20"
    assert found.checkpoint.format is Format.DEEPSPEED
    assert "newer than the 'latest' tag" in found.skipped[0].reason


def test_deepspeed_tag_naming_a_missing_folder_falls_back(tmp_path: Path) -> None:
    d = tmp_path / "global_step10"
    d.mkdir()
    torch_zip(d / "mp_rank_00_model_states.pt")
    torch_zip(d / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    (tmp_path / "latest").write_text("global_step20\n")
    found = latest(tmp_path)
    assert found.checkpoint is not None and found.checkpoint.path.name == "global_step10"
    assert found.skipped[0].reason == "corrupt: 'latest' names global_step20, which does not exist"


def test_lightning_ckpt_files(tmp_path: Path) -> None:
    lightning(tmp_path, "epoch=0-step=100.ckpt")
    lightning(tmp_path, "epoch=1-step=200.ckpt", whole=False)
    (tmp_path / "epoch=2-step=300.ckpt").write_bytes(b"")
    found = latest(tmp_path)
    assert found.checkpoint is not None
    assert (found.checkpoint.step, found.checkpoint.format) == (100, Format.LIGHTNING)
    assert [s.step for s in found.skipped] == [300, 200]


def test_unstepped_last_ckpt_counts_only_when_nothing_stepped_is_complete(tmp_path: Path) -> None:
    lightning(tmp_path, "last.ckpt")
    assert latest(tmp_path).checkpoint.path.name == "last.ckpt"  # type: ignore[union-attr]
    lightning(tmp_path, "step=5.ckpt")
    assert latest(tmp_path).checkpoint.path.name == "step=5.ckpt"  # type: ignore[union-attr]


def test_other_folders_are_not_checkpoints(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / ".slurmpre").mkdir()
    (tmp_path / "notes.txt").write_text("x")
    assert latest(tmp_path) == ck.Resolution(None, ())
    assert list_all(tmp_path) == []


def test_hostile_folder_names(tmp_path: Path) -> None:
    root = tmp_path / HOSTILE
    good = dcp(root, HOSTILE + "step-7")
    dcp(root, HOSTILE + "step-8", complete=False)
    found = latest(root)
    assert found.checkpoint is not None and found.checkpoint.path == good
    proc = slurmpre_cli("ckpt", "latest", str(root), check=True)
    assert proc.stdout == f"{good}\n"
    assert "passing over" in proc.stderr


def test_in_flight_commit_is_never_resolved(tmp_path: Path) -> None:
    slurmpre_ckpt(tmp_path, 1)
    incoming = fresh_incoming(tmp_path, 2, "job-0")
    (incoming / "model.pt").write_bytes(b"x")
    (incoming / ".metadata").write_bytes(b"looks complete but is not committed")
    assert latest(tmp_path).checkpoint.step == 1  # type: ignore[union-attr]


def test_commit_never_replaces_a_complete_checkpoint(tmp_path: Path) -> None:
    first = slurmpre_ckpt(tmp_path, 5, {"model.pt": b"first"})
    slurmpre_ckpt(tmp_path, 5, {"model.pt": b"second!"})
    assert (first / "model.pt").read_bytes() == b"first"
    assert latest(tmp_path).checkpoint.path == first  # type: ignore[union-attr]
    # Our duplicate is set aside, hidden, not deleted.
    assert len(list(tmp_path.glob(".duplicate-step-00000005-*"))) == 1


def test_commit_moves_a_partial_of_the_same_step_aside(tmp_path: Path) -> None:
    partial = tmp_path / ck.step_dir_name(5)
    partial.mkdir()
    (partial / "model.pt").write_bytes(b"half")
    done = slurmpre_ckpt(tmp_path, 5, {"model.pt": b"whole"})
    assert (done / "model.pt").read_bytes() == b"whole"
    aside = list(tmp_path.glob(".partial-step-00000005-*"))
    assert len(aside) == 1 and (aside[0] / "model.pt").read_bytes() == b"half"


def test_failed_write_commits_nothing(tmp_path: Path) -> None:
    slurmpre_ckpt(tmp_path, 1)
    with pytest.raises(RuntimeError), writing(tmp_path, 2) as path:
        (path / "model.pt").write_bytes(b"x")
        raise RuntimeError("disk full")
    assert latest(tmp_path).checkpoint.step == 1  # type: ignore[union-attr]
    assert not (tmp_path / ck.step_dir_name(2)).exists()


def test_racing_writer_never_shows_a_partial(tmp_path: Path) -> None:
    """A reader resolving while a writer commits step after step sees only complete ones."""
    slurmpre_ckpt(tmp_path, 0)
    stop = threading.Event()
    seen: list[int] = []
    errors: list[BaseException] = []  # what the reader saw wrong, raised below in pytest's thread

    def read_all() -> None:
        while not stop.is_set():
            found = latest(tmp_path).checkpoint
            assert found is not None and found.complete
            marker = json.loads((found.path / ck.MARKER).read_text())
            assert marker["step"] == found.step
            seen.append(found.step or 0)

    def reader() -> None:
        try:
            read_all()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's own thread
            errors.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for step in range(1, 40):
            slurmpre_ckpt(tmp_path, step, {f"shard{i}.bin": bytes(200) for i in range(5)})
    finally:
        stop.set()
        thread.join()
    if errors:
        raise errors[0]
    assert seen and seen == sorted(seen) and seen[-1] <= 39


def test_list_reports_every_checkpoint(tmp_path: Path) -> None:
    slurmpre_ckpt(tmp_path, 1)
    hf(tmp_path, 2, weights=False)
    proc = slurmpre_cli("ckpt", "list", str(tmp_path), "--json", check=True)
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "slurmpre/checkpoints/1"
    rows = doc["checkpoints"]
    assert [(r["step"], r["format"], r["complete"]) for r in rows] == [
        (2, "hf-trainer", False),
        (1, "slurmpre", True),
    ]
    text = slurmpre_cli("ckpt", "list", str(tmp_path), check=True).stdout.splitlines()
    assert text[0].split() == ["step", "state", "format", "name", "(why)"]
    assert "INCOMPLETE" in text[1] and "complete" in text[2]


def test_ckpt_latest_without_any_is_exit_1(tmp_path: Path) -> None:
    proc = slurmpre_cli("ckpt", "latest", str(tmp_path))
    assert proc.returncode == 1
    assert proc.stderr == f"slurmpre: error: no complete checkpoint under '{tmp_path}'\n"


def test_names_outside_every_layouts_grammar_are_ignored_silently(tmp_path: Path) -> None:
    # The last: eight Arabic-Indic digits, which a Unicode \d would take for step 99.
    for name in ("junk-5", "model-v2", "step-1e9", "step--1", "step-10.5", "run_7", "logs",
                 "step-\u0660\u0660\u0660\u0660\u0660\u0660\u0669\u0669"):  # fmt: skip
        dcp(tmp_path, name)
    good = dcp(tmp_path, "step_3")
    found = latest(tmp_path)
    assert found.checkpoint is not None and found.checkpoint.path == good
    assert found.skipped == ()
    assert [c.path.name for c in list_all(tmp_path)] == ["step_3"]
    ignored = {i.name: i.reason for i in ck.ignored(tmp_path)}
    assert ignored["step-1e9"] == "not a checkpoint name" and len(ignored) == 8
    proc = slurmpre_cli("ckpt", "list", str(tmp_path), "--all", check=True)
    assert "ignored" in proc.stdout and "step-10.5  (not a checkpoint name)" in proc.stdout


def test_one_step_in_two_spellings_resolves_to_slurmpres_own(tmp_path: Path) -> None:
    dcp(tmp_path, "step-10")
    canonical_one = slurmpre_ckpt(tmp_path, 10)
    dcp(tmp_path, "step_10")
    for _ in range(3):
        assert latest(tmp_path).checkpoint.path == canonical_one  # type: ignore[union-attr]


def test_entries_that_lead_outside_the_folder_are_never_chosen(tmp_path: Path) -> None:
    inside, outside = tmp_path / "ckpt", tmp_path / "elsewhere"
    good = slurmpre_ckpt(inside, 5)
    far = slurmpre_ckpt(outside, 99)
    (inside / "step-99").symlink_to(far)
    (inside / "step-00000098").symlink_to(far)  # slurmpre's own name: its marker is there
    (inside / "global_step50").symlink_to(far)
    (inside / "loop-a").symlink_to(inside / "loop-b")
    (inside / "loop-b").symlink_to(inside / "loop-a")
    (inside / "step-6").symlink_to(inside / "step-6")
    found = latest(inside)
    assert found.checkpoint is not None and found.checkpoint.path == good
    reasons = {i.name: i.reason for i in ck.ignored(inside)}
    assert reasons["step-99"] == "a symlink to outside the checkpoint folder"
    assert reasons["step-00000098"] == "a symlink to outside the checkpoint folder"
    assert reasons["global_step50"] == "a symlink to outside the checkpoint folder"
    assert reasons["step-6"] == "a broken symlink, or a symlink loop"
    # A symlink that stays inside is a second name for a checkpoint, never one of its own:
    # counted, prune would delete what it leads to as an older copy.
    (inside / "step-00000007").symlink_to(good)
    assert latest(inside).checkpoint.path.name == "step-00000005"  # type: ignore[union-attr]
    reasons = {i.name: i.reason for i in ck.ignored(inside)}
    assert reasons["step-00000007"].startswith("a symlink: never a checkpoint of its own")


def test_hf_weights_are_looked_into(tmp_path: Path) -> None:
    hf(tmp_path, 100)
    empty = hf(tmp_path, 200)
    (empty / "model.safetensors").write_bytes(b"")
    one_of_four = hf(tmp_path, 300, weights=False)
    (one_of_four / "model-00001-of-00004.safetensors").write_bytes(b"w")
    indexed = hf(tmp_path, 400, weights=False)
    shards = [f"model-0000{i}-of-00002.safetensors" for i in (1, 2)]
    (indexed / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": shards[0], "b": shards[1]}})
    )
    (indexed / shards[0]).write_bytes(b"w")
    found = latest(tmp_path)
    assert found.checkpoint is not None and found.checkpoint.step == 100
    assert [s.reason for s in found.skipped] == [
        f"partial: {shards[1]} of the 2 in model.safetensors.index.json",
        "partial: sharded weights without their index",
        "partial: model.safetensors is empty",
    ]
    (indexed / shards[1]).write_bytes(b"w")
    assert latest(tmp_path).checkpoint.step == 400  # type: ignore[union-attr]


def test_dcp_metadata_must_name_shards_that_are_there(tmp_path: Path) -> None:
    dcp(tmp_path, "step-1")
    tiny = dcp(tmp_path, "step-2", shard=False)
    (tiny / ".metadata").write_bytes(b"\x80\x04N.\x00\x00")  # 6 bytes, no shard named
    dcp(tmp_path, "step-3", shard=False)  # real metadata, its shard never written
    found = latest(tmp_path)
    assert found.checkpoint is not None and found.checkpoint.step == 1
    assert [s.reason for s in found.skipped] == [
        "partial: __0_0.distcp is missing or empty (1 shards named)",
        "corrupt: .metadata names no shard file",
    ]


def test_a_ckpt_that_is_not_a_zip_that_opens_is_passed_over(tmp_path: Path) -> None:
    lightning(tmp_path, "step=1.ckpt")
    (tmp_path / "step=2.ckpt").write_bytes(b"PK\x03\x04" + b"x" * 100 + b"PK\x05\x06" + b"\0" * 18)
    found = latest(tmp_path)
    assert found.checkpoint is not None and found.checkpoint.step == 1
    assert found.skipped[0].reason == "corrupt: the archive holds no data.pkl"
    (tmp_path / "step=3.ckpt").write_bytes(b"PK\x03\x04" + b"x" * 100)  # cut before its end
    assert (
        latest(tmp_path)
        .skipped[0]
        .reason.startswith("partial or corrupt: not a zip archive that opens")
    )


def test_many_partial_checkpoints_make_one_summary_line(tmp_path: Path) -> None:
    slurmpre_ckpt(tmp_path, 0)
    for step in range(1, 2001):
        (tmp_path / ck.step_dir_name(step)).mkdir()
    proc = slurmpre_cli("ckpt", "latest", str(tmp_path), check=True)
    lines = proc.stderr.splitlines()
    assert len(lines) == 4
    assert lines[-1] == "... and 1997 more newer ones that are not complete"


def test_an_empty_folder_argument_is_refused() -> None:
    proc = slurmpre_cli("ckpt", "latest", "")
    assert proc.returncode == 2
    assert proc.stderr == "slurmpre: error: FOLDER is empty: name the checkpoint folder\n"


# -- the layouts frameworks write by themselves (each written in its library's order) --
def ds_tag(folder: Path, tag: str, *, latest: bool = True, whole: bool = True) -> None:
    """DeepSpeed's save_checkpoint: the tag folder's model states, then `latest`."""
    (folder / tag).mkdir(parents=True)
    torch_zip(folder / tag / "zero_pp_rank_0_mp_rank_00_model_states.pt", whole=whole)
    torch_zip(folder / tag / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    if latest:
        (folder / "latest").write_text(tag)


def test_hf_checkpoints_under_fsdp_and_deepspeed(tmp_path: Path) -> None:
    fsdp = hf(tmp_path, 100, weights=False)  # FSDP, sharded state dict
    dcp(fsdp, "pytorch_model_fsdp_0")
    ds = hf(tmp_path, 200, weights=False)  # DeepSpeed ZeRO-3
    ds_tag(ds, "global_step200")
    torn_fsdp = hf(tmp_path, 300, weights=False)
    dcp(torn_fsdp, "pytorch_model_fsdp_0", complete=False)
    torn_ds = hf(tmp_path, 400, weights=False)
    ds_tag(torn_ds, "global_step400", whole=False)
    found = latest(tmp_path)
    assert found.checkpoint is not None and found.checkpoint.step == 200
    assert found.checkpoint.reason.startswith("trainer_state.json and DeepSpeed tag global_step200")
    assert [s.reason for s in found.skipped] == [
        "partial: global_step400/zero_pp_rank_0_mp_rank_00_model_states.pt is not a whole "
        "torch zip archive",
        "pytorch_model_fsdp_0: partial: .metadata is not written",
    ]
    (tmp_path / "checkpoint-200" / "latest").unlink()  # DeepSpeed had not finished
    (tmp_path / "checkpoint-400").rename(tmp_path / "old-400")
    (tmp_path / "checkpoint-300").rename(tmp_path / "old-300")
    found = latest(tmp_path)
    assert found.checkpoint is not None and found.checkpoint.step == 100
    assert "FSDP-sharded weights in pytorch_model_fsdp_0" in found.checkpoint.reason


def test_hf_safetensors_shards_need_their_index_and_every_shard(tmp_path: Path) -> None:
    whole = hf(tmp_path, 10, weights=False)
    index = {
        "weight_map": {
            "a": "model-00001-of-00002.safetensors",
            "b": "model-00002-of-00002.safetensors",
        }
    }
    (whole / "model.safetensors.index.json").write_text(json.dumps(index))
    for shard in set(index["weight_map"].values()):
        (whole / shard).write_bytes(b"w")
    torn = hf(tmp_path, 20, weights=False)
    (torn / "model.safetensors.index.json").write_text(json.dumps(index))
    (torn / "model-00001-of-00002.safetensors").write_bytes(b"w")
    found = latest(tmp_path)
    assert found.checkpoint is not None and found.checkpoint.step == 10
    assert found.skipped[0].reason == (
        "partial: model-00002-of-00002.safetensors of the 2 in model.safetensors.index.json"
    )


def accelerate(folder: Path, step: int, *, processes: int = 2, rng: bool = True) -> Path:
    """Accelerate's save_state: model, optimizer, scheduler, then each process's RNG."""
    path = folder / f"checkpoint_{step}"
    path.mkdir(parents=True)
    (path / "model.safetensors").write_bytes(b"w")
    (path / "optimizer.bin").write_bytes(b"o")
    (path / "scheduler.bin").write_bytes(b"s")
    for rank in range(processes if rng else 0):
        (path / f"random_states_{rank}.pkl").write_bytes(b"r")
    return path


def test_accelerate_save_state_folders(tmp_path: Path) -> None:
    accelerate(tmp_path, 3)
    accelerate(tmp_path, 4, rng=False)  # killed before its random states
    gap = accelerate(tmp_path, 5)
    (gap / "random_states_0.pkl").unlink()
    (gap / "random_states_2.pkl").write_bytes(b"r")
    (gap / "random_states_0.pkl").write_bytes(b"")
    found = latest(tmp_path)
    assert found.checkpoint is not None
    assert (found.checkpoint.step, found.checkpoint.format) == (3, Format.ACCELERATE)
    assert found.checkpoint.reason == "save_state of 2 process(es): weights"
    assert [s.reason for s in found.skipped] == [
        "partial: random_states_0.pkl is empty",
        "partial: no completion mark (trainer_state.json, random_states_0.pkl, .metadata)",
    ]


def test_lightnings_own_folders_and_its_deepspeed_checkpoints(tmp_path: Path) -> None:
    logs = tmp_path / "lightning_logs"
    v0 = logs / "version_0" / "checkpoints"
    v1 = logs / "version_1" / "checkpoints"
    v0.mkdir(parents=True)
    v1.mkdir(parents=True)
    lightning(v0, "epoch=0-step=100.ckpt")
    lightning(v1, "epoch=1-step=200.ckpt", whole=False)  # killed mid-write
    ds = v1 / "epoch=1-step=150.ckpt"  # the DeepSpeed strategy: a folder
    ds.mkdir()
    ds_tag(ds, "checkpoint")
    found = latest(tmp_path)
    assert found.checkpoint is not None and found.checkpoint.step == 150
    assert found.checkpoint.format is Format.LIGHTNING
    assert found.checkpoint.where == str(ds)
    (ds / "latest").unlink()  # DeepSpeed had not finished
    found = latest(tmp_path)
    assert found.checkpoint is not None and found.checkpoint.where == str(
        v0 / "epoch=0-step=100.ckpt"
    )
    assert ck.findable(tmp_path, found.checkpoint.where)
    assert not ck.findable(tmp_path, tmp_path / "lightning_logs" / "elsewhere" / "x.ckpt")


def test_slurmpres_own_name_is_complete_only_through_its_commit(tmp_path: Path) -> None:
    good = dcp(tmp_path, "step_10")
    dcp(tmp_path, ck.step_dir_name(20))  # a whole DCP save, but not through slurmpre.checkpoint()
    named = dcp(tmp_path, "step-10")  # one marker too many, and in another layout's name
    (named / ck.MARKER).write_text((slurmpre_ckpt(tmp_path / "x", 10) / ck.MARKER).read_text())
    found = latest(tmp_path)
    assert found.checkpoint is not None and found.checkpoint.path == good
    assert [s.name for s in found.skipped] == ["step-00000020"]
    assert "slurmpre's own name" in found.skipped[0].reason
    assert "slurmpre.checkpoint()" in found.skipped[0].reason
    verdicts = {c.name: c.complete for c in list_all(tmp_path)}
    assert verdicts == {"step-00000020": False, "step_10": True, "step-10": True}
    # Another layout's name is judged by that layout's mark: the DCP save in step-10 is
    # complete (the tie with step_10 goes by name), and slurmpre's marker plays no part.
    (named / ".metadata").unlink()
    assert not ck.judge(named).complete


def test_a_partial_folder_costs_one_lookup_in_slurmpres_layout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bench/resolver.py's 10,000 partial folders: the hot path looks for slurmpre's
    marker in each, and for nothing else (a second lookup each doubles its cost)."""
    good = slurmpre_ckpt(tmp_path, 1)
    for step in range(2, 202):
        (tmp_path / ck.step_dir_name(step)).mkdir()
    (tmp_path / ck.step_dir_name(202)).write_text("a file by a folder's name")
    lookups: list[str] = []
    real = os.access

    def counted(path: str, mode: int, **kw: object) -> bool:
        lookups.append(path)
        return real(path, mode, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "access", counted)
    found = latest(tmp_path)
    assert found.checkpoint is not None and found.checkpoint.path == good
    # The file is no checkpoint: it drops out of what the log names, judged in full.
    assert [s.name for s in found.skipped] == [ck.step_dir_name(s) for s in (201, 200, 199)]
    assert found.more == 197
    assert found.skipped[0].reason == f"partial: no completion mark ({ck.MARKER})"
    per_folder = [p for p in lookups if p.endswith(ck.MARKER)]
    assert len(per_folder) <= 202 + 1 + 3, len(per_folder)  # hot path; the chosen; the shown
    assert len(lookups) - len(per_folder) <= 3 * 3, lookups


def test_latest_agrees_with_judging_every_candidate_in_order(tmp_path: Path, seed: int) -> None:
    """latest() takes shortcuts (slurmpre's own names merged in by string order, one
    lookup before looking closer); list_all() judges everything, in the documented
    order. On random folders full of ties and layouts, the first complete one agrees."""
    rng = random.Random(seed)
    for case in range(120):
        folder = tmp_path / f"case-{case}"
        folder.mkdir()
        for _ in range(rng.randint(0, 12)):
            step = rng.choice([0, 1, 2, 3, 5, 8, 10**8 + 1])
            kind = rng.choice(["own", "own-partial", "own-dcp", "dcp", "dcp-partial", "hf",
                               "hf-partial", "ckpt", "ckpt-partial", "last", "file"])  # fmt: skip
            own = folder / ck.step_dir_name(step)
            try:
                if kind == "own":
                    if not own.exists():
                        slurmpre_ckpt(folder, step)
                elif kind in ("own-partial", "own-dcp", "file") and not own.exists():
                    if kind == "file":
                        own.write_text("not a folder")
                    else:
                        dcp(folder, own.name, complete=kind == "own-dcp")
                elif kind.startswith("dcp"):
                    dcp(folder, rng.choice(["step_", "step-", "run-step-"]) + str(step),
                        complete=kind == "dcp")  # fmt: skip
                elif kind.startswith("hf"):
                    hf(folder, step, state="{}" if kind == "hf" else None)
                elif kind.startswith("ckpt"):
                    lightning(folder, f"epoch=0-step={step}.ckpt", whole=kind == "ckpt")
                elif kind == "last":
                    lightning(folder, "last.ckpt", whole=rng.random() < 0.5)
            except (FileExistsError, CheckpointError):
                pass  # the same name twice: keep the first
        first = next((c for c in list_all(folder) if c.complete), None)
        found = latest(folder).checkpoint
        assert (found and found.where) == (first and first.where), (seed, case)
