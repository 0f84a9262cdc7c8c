"""The frameworks' own checkpoint names (#23 item 7), each judged complete by its
library's own write order. None of the three writes on this machine (Megatron-LM's
saver lives in its repository, not in the megatron-core package, and megatron-core's
distributed save needs CUDA; NeMo 2 and torchtitan pull in trees of dependencies the
test environment does not carry), so the layouts are built here as their code writes
them, in its order:

- Megatron-LM, megatron/training/checkpointing.py `save_checkpoint`: every rank saves
  into ``iter_{:07d}`` (``mp_rank_XX/model_optim_rng.pt``, or a torch_dist folder), a
  barrier (or the async save's finalize step), then rank 0 writes the iteration into
  ``latest_checkpointed_iteration.txt`` (`get_checkpoint_tracker_filename`);
- NeMo 2, nemo/lightning/pytorch/callbacks/model_checkpoint.py `_save_checkpoint`:
  ``set_checkpoint_unfinished_marker`` touches ``<name>-unfinished`` beside the
  checkpoint, every rank saves, the finalize callback removes the mark; names from the
  recipes' ``{model_name}--{val_loss:.2f}-{step}-{consumed_samples}``, and ``-last``
  copies or links (`_link_checkpoint`);
- torchtitan, torchtitan/components/checkpointer/dcp.py: ``dcp.save`` into
  ``<dump_folder>/checkpoint/step-{step}`` (`_create_checkpoint_id`); its loader takes
  the highest step whose folder has ``.metadata`` (`_find_load_step`).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import slurmpre
from slurmpre.errors import CheckpointError
from slurmpre.folder.checkpoints import Format, ignored, judge, latest, list_all
from slurmpre.folder.ledger import Ledger
from slurmpre.login.prune import prune

from tests.conftest import slurmpre_cli
from tests.fakes import Jobs
from tests.folder.test_checkpoints import dcp, torch_zip

TRACKER = "latest_checkpointed_iteration.txt"


def megatron_iter(folder: Path, iteration: int, *, dist: bool = False) -> Path:
    path = folder / f"iter_{iteration:07d}"
    if dist:  # --ckpt-format torch_dist: a torch.distributed.checkpoint folder
        dcp(folder, path.name)
        (path / "common.pt").write_bytes(b"common")
    else:
        (path / "mp_rank_00").mkdir(parents=True)
        torch_zip(path / "mp_rank_00" / "model_optim_rng.pt")
    return path


def tracker(folder: Path, text: str) -> None:
    (folder / TRACKER).write_text(text)


def newest(folder: Path) -> tuple[int | None, str]:
    found = latest(folder).checkpoint
    assert found is not None
    return found.step, found.name


def test_megatron_iterations_count_up_to_the_tracker(tmp_path: Path) -> None:
    megatron_iter(tmp_path, 100)
    assert latest(tmp_path).checkpoint is None  # its save had not finished: no tracker yet
    tracker(tmp_path, "100")
    megatron_iter(tmp_path, 200, dist=True)  # the next save, written, tracker not yet
    assert newest(tmp_path) == (100, "iter_0000100")
    (passed,) = [c for c in list_all(tmp_path) if not c.complete]
    assert passed.name == "iter_0000200" and passed.format is Format.MEGATRON
    assert f"newer than {TRACKER} (100)" in passed.reason
    tracker(tmp_path, "200\n")
    assert newest(tmp_path) == (200, "iter_0000200")
    assert [c.complete for c in list_all(tmp_path)] == [True, True]


def test_megatron_tracker_cut_short_passes_over_only_the_newest(tmp_path: Path) -> None:
    for it in (100, 200, 300):
        megatron_iter(tmp_path, it)
    tracker(tmp_path, "")  # rank 0 was killed between open('w') and write
    assert newest(tmp_path) == (200, "iter_0000200")
    tracker(tmp_path, "release")  # a converted release: Megatron loads release/, not these
    assert latest(tmp_path).checkpoint is None
    tracker(tmp_path, "300")
    (tmp_path / "iter_0000400").mkdir()  # created, nothing written
    tracker(tmp_path, "400")
    assert newest(tmp_path) == (300, "iter_0000300")  # an empty folder is no save


def test_megatron_tracker_and_names_are_not_listed_as_strangers(tmp_path: Path) -> None:
    megatron_iter(tmp_path, 5)
    tracker(tmp_path, "5")
    (tmp_path / "release").mkdir()
    assert [i.name for i in ignored(tmp_path)] == ["release"]


NEMO = "megatron_gpt--val_loss=2.50-step={step}-consumed_samples={samples}.0"


def nemo(folder: Path, step: int, *, unfinished: bool = False) -> Path:
    path = folder / NEMO.format(step=step, samples=step * 8)
    if unfinished:  # set_checkpoint_unfinished_marker comes before any write
        (folder / f"{path.name}-unfinished").touch()
    dcp(path, "weights")
    (path / "context").mkdir()
    (path / "context" / "model.yaml").write_text("model: gpt\n")
    return path


def test_nemo_checkpoints_are_complete_once_their_unfinished_mark_is_gone(
    tmp_path: Path,
) -> None:
    nemo(tmp_path, 500)
    saving = nemo(tmp_path, 1000, unfinished=True)
    assert newest(tmp_path) == (500, NEMO.format(step=500, samples=4000))
    judged = judge(saving)
    assert judged.format is Format.NEMO and not judged.complete
    assert f"{saving.name}-unfinished is beside it" in judged.reason
    (tmp_path / f"{saving.name}-unfinished").unlink()  # the finalize callback
    assert newest(tmp_path) == (1000, saving.name)
    # The mark also stands while NeMo removes an old one: that one is no longer whole.
    (tmp_path / f"{NEMO.format(step=500, samples=4000)}-unfinished").touch()
    assert [c.step for c in list_all(tmp_path) if c.complete] == [1000]


def test_nemo_last_links_and_copies(tmp_path: Path) -> None:
    real = nemo(tmp_path, 500)
    link = tmp_path / f"{real.name}-last"
    link.symlink_to(real.name)  # save_last="link": judged by where it leads
    assert newest(tmp_path) == (500, real.name)

    (why,) = [i.reason for i in ignored(tmp_path) if i.name == link.name]
    assert why.startswith("a symlink: never a checkpoint of its own")
    link.unlink()
    last = tmp_path / (NEMO.format(step=600, samples=4800) + "-last")
    copy = nemo(tmp_path / "x", 600).rename(last)
    assert newest(tmp_path) == (600, copy.name)  # save_last=True: a copy of its own
    plain = tmp_path / "default--reduced_train_loss=2.5000-epoch=0-step=700-last"
    dcp(plain, "weights")
    assert newest(tmp_path) == (700, plain.name)


def test_torchtitan_steps_under_its_checkpoint_folder(tmp_path: Path) -> None:
    dump = tmp_path / "outputs"
    titan = dump / "checkpoint"
    dcp(titan, "step-10")
    dcp(titan, "step-20", complete=False)  # shards written, .metadata not yet
    dcp(titan, "step-12345678")  # eight digits: still torchtitan's, judged as DCP
    (titan / "step-30").mkdir()
    assert newest(dump) == (12345678, "step-12345678")
    (titan / "step-12345678").rename(tmp_path / "away")
    found = latest(dump).checkpoint
    assert found is not None and found.where == str(titan / "step-10")
    assert found.format is Format.DCP
    judged = {c.step: c.complete for c in list_all(dump)}
    assert judged == {30: False, 20: False, 10: True}
    assert judge(titan / "step-10", dump).complete


def test_a_checkpoint_folder_that_is_a_link_is_never_followed(tmp_path: Path) -> None:
    dump = tmp_path / "outputs"
    dump.mkdir()
    dcp(tmp_path / "elsewhere", "step-10")
    (dump / "checkpoint").symlink_to(tmp_path / "elsewhere")
    assert latest(dump).checkpoint is None
    megatron = tmp_path / "mega"
    megatron_iter(tmp_path / "real", 100)
    megatron.mkdir()
    (megatron / "iter_0000100").symlink_to(tmp_path / "real" / "iter_0000100")
    tracker(megatron, "100")
    assert latest(megatron).checkpoint is None


def test_committed_takes_each_frameworks_save(tmp_path: Path) -> None:
    env = {"SLURMPRE_CHECKPOINT_DIR": str(tmp_path), "RANK": "1", "WORLD_SIZE": "2"}
    path = megatron_iter(tmp_path, 100)
    with pytest.raises(CheckpointError, match="not a complete checkpoint"):
        slurmpre.committed(path, env=env)
    tracker(tmp_path, "100")
    assert slurmpre.committed(path, env=env) == path
    titan = tmp_path / "checkpoint"
    dcp(titan, "step-7")
    assert slurmpre.committed(titan / "step-7", env=env) == titan / "step-7"
    saved = nemo(tmp_path, 9)
    assert slurmpre.committed(saved, env=env) == saved


def test_prune_keeps_what_the_frameworks_would_still_load(tmp_path: Path) -> None:
    for it in (100, 200, 300):
        megatron_iter(tmp_path, it)
    tracker(tmp_path, "200")
    Ledger(tmp_path).ensure()  # a folder slurmpre ran in
    report = prune(tmp_path, 1, Jobs({}))
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("iter_"))
    assert left == ["iter_0000200", "iter_0000300"], report  # 300 is not known older


@pytest.mark.parametrize(
    ("text", "iteration"),
    [("²", None), ("1²", None), ("9" * 5000, None), ("0", None), ("-300", None),
     ("3e2", None), ("300 ", 300), ("+300", 300), ("3_00", 300), ("٣٠٠", 300)],
)  # fmt: skip
def test_megatrons_tracker_is_read_as_megatron_reads_it(
    tmp_path: Path, text: str, iteration: int | None
) -> None:
    """'²' is a digit to str.isdigit() and 5,000 digits are more than int() reads: both
    made the scan raise, and every command on the folder exit 3 (#35). Megatron reads the
    tracker with int() of the stripped text (and wants more than 0): so does slurmpre."""
    for it in (100, 200):
        megatron_iter(tmp_path, it)
    tracker(tmp_path, text)
    if iteration is None:  # no iteration: the newest is passed over, the older stand
        assert newest(tmp_path) == (100, "iter_0000100")
    else:
        assert newest(tmp_path) == (200, "iter_0000200")
    result = slurmpre_cli("ckpt", "list", str(tmp_path))
    assert result.returncode == 0, result.stderr
