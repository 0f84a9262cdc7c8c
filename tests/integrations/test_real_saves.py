"""The resolver on checkpoint folders the libraries themselves write, in this test run:
the Hugging Face Trainer (whole and sharded safetensors), Accelerate's save_state,
Lightning's default layout, torch.distributed.checkpoint, and FSDP-sharded saves.

For each: the newest real save is chosen; then it is cut the ways a kill
mid-write leaves it (its last-written file missing, a weight file empty or half
written, a shard gone), and the resolver must pass it over for the older one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from slurmpre.folder.checkpoints import Format, latest

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")


def chosen(folder: Path) -> str | None:
    found = latest(folder)
    return None if found.checkpoint is None else found.checkpoint.path.name


def truncate(path: Path, keep: float) -> None:
    size = path.stat().st_size
    with path.open("r+b") as fh:
        fh.truncate(int(size * keep))


def cuts_fall_back(
    folder: Path,
    newest: str,
    older: str,
    cuts: dict[str, Callable[[Path], object]],
    reset: Callable[[Path], None] = lambda _folder: None,
) -> None:
    """Each cut, made on a fresh copy of ``newest``, makes the resolver choose ``older``."""
    pristine = folder.parent / f"{folder.name}-pristine-{newest}"
    shutil.copytree(folder / newest, pristine)
    assert chosen(folder) == newest
    for what, cut in cuts.items():
        shutil.rmtree(folder / newest)
        shutil.copytree(pristine, folder / newest)
        reset(folder)
        cut(folder / newest)
        found = latest(folder)
        assert found.checkpoint is not None and found.checkpoint.path.name == older, what
        skipped = {c.path.name: c for c in found.skipped}
        assert newest in skipped and not skipped[newest].complete, what


# -- Hugging Face Trainer ---------------------------------------------------------------
transformers = pytest.importorskip("transformers")


class Tiny(torch.nn.Module):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(64, 64)
        self.out = torch.nn.Linear(64, 1)

    def forward(self, x: Any, labels: Any) -> dict[str, Any]:
        pred = self.out(self.lin(x)).squeeze(-1)
        return {"loss": torch.nn.functional.mse_loss(pred, labels)}


class TinyPreTrained(transformers.PreTrainedModel):  # type: ignore[misc]
    """The same, as a PreTrainedModel: save_pretrained shards it with an index."""

    config_class = transformers.PretrainedConfig

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.lin = torch.nn.Linear(64, 64)
        self.out = torch.nn.Linear(64, 1)
        self.post_init()

    def forward(self, x: Any, labels: Any) -> dict[str, Any]:
        pred = self.out(self.lin(x)).squeeze(-1)
        return {"loss": torch.nn.functional.mse_loss(pred, labels)}


def hf_data() -> list[dict[str, Any]]:
    g = torch.Generator().manual_seed(0)
    xs = torch.randn(32, 64, generator=g)
    return [{"x": xs[i], "labels": xs[i].sum()} for i in range(32)]


def hf_train(out: Path, model: Any, **extra: Any) -> None:
    args = transformers.TrainingArguments(
        output_dir=str(out), max_steps=4, per_device_train_batch_size=4, save_strategy="steps",
        save_steps=2, logging_strategy="no", report_to=[], use_cpu=True, seed=0,
        dataloader_num_workers=0, **extra,
    )  # fmt: skip
    transformers.Trainer(model=model, args=args, train_dataset=hf_data()).train()


def test_hf_trainer_checkpoints_and_their_cuts(tmp_path: Path) -> None:
    hf_train(tmp_path, Tiny())
    assert {p.name for p in tmp_path.iterdir()} >= {"checkpoint-2", "checkpoint-4"}
    assert latest(tmp_path).checkpoint.format is Format.HF  # type: ignore[union-attr]
    cuts_fall_back(
        tmp_path,
        "checkpoint-4",
        "checkpoint-2",
        {
            "trainer_state.json not written yet": lambda p: (p / "trainer_state.json").unlink(),
            "weights empty": lambda p: truncate(p / "model.safetensors", 0),
            "weights gone": lambda p: (p / "model.safetensors").unlink(),
            "trainer_state.json half written": lambda p: truncate(p / "trainer_state.json", 0.5),
        },
    )


def test_hf_sharded_safetensors_need_their_index_and_every_shard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = TinyPreTrained.save_pretrained

    def small_shards(self: Any, *args: Any, **kw: Any) -> Any:
        return real(self, *args, **{**kw, "max_shard_size": "10KB"})

    monkeypatch.setattr(TinyPreTrained, "save_pretrained", small_shards)
    hf_train(tmp_path, TinyPreTrained(transformers.PretrainedConfig()))
    newest = tmp_path / "checkpoint-4"
    shards = sorted(p.name for p in newest.glob("model-*-of-*.safetensors"))
    assert len(shards) >= 2 and (newest / "model.safetensors.index.json").exists()
    cuts_fall_back(
        tmp_path,
        "checkpoint-4",
        "checkpoint-2",
        {
            "the index not written yet": lambda p: (p / "model.safetensors.index.json").unlink(),
            "a shard gone": lambda p: (p / shards[-1]).unlink(),
            "a shard empty": lambda p: truncate(p / shards[0], 0),
        },
    )


# -- Accelerate ---------------------------------------------------------------------------
def test_accelerate_save_state_folders_and_their_cuts(tmp_path: Path) -> None:
    accelerate = pytest.importorskip("accelerate")
    from accelerate.utils import ProjectConfiguration

    accelerator = accelerate.Accelerator(
        cpu=True,
        project_config=ProjectConfiguration(
            project_dir=str(tmp_path), automatic_checkpoint_naming=True
        ),
    )
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    for _ in range(2):
        optimizer.step()
        accelerator.save_state()
    folder = tmp_path / "checkpoints"
    assert sorted(p.name for p in folder.iterdir()) == ["checkpoint_0", "checkpoint_1"]
    assert latest(folder).checkpoint.format is Format.ACCELERATE  # type: ignore[union-attr]
    weights = next(
        n
        for n in ("model.safetensors", "pytorch_model.bin")
        if (folder / "checkpoint_1" / n).exists()
    )
    cuts_fall_back(
        folder,
        "checkpoint_1",
        "checkpoint_0",
        {
            "random states not written yet": lambda p: (p / "random_states_0.pkl").unlink(),
            "weights empty": lambda p: truncate(p / weights, 0),
            "weights gone": lambda p: (p / weights).unlink(),
        },
    )


# -- Lightning ------------------------------------------------------------------------------
def test_lightning_default_layout_and_a_half_written_ckpt(tmp_path: Path) -> None:
    L = pytest.importorskip("lightning.pytorch")
    from tests.integrations.test_lightning import Tiny as Module

    xs = torch.randn(32, 4, generator=torch.Generator().manual_seed(0))
    data = torch.utils.data.DataLoader(list(zip(xs, xs.sum(-1), strict=True)), batch_size=4)
    every = L.callbacks.ModelCheckpoint(every_n_train_steps=2, save_top_k=-1)
    trainer = L.Trainer(
        default_root_dir=str(tmp_path), max_steps=4, accelerator="cpu", devices=1,
        callbacks=[every], enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(Module(), data)
    # Lightning's own layout, two levels down: the resolver is given the job's folder.
    ckpts = tmp_path / "lightning_logs" / "version_0" / "checkpoints"
    names = sorted(p.name for p in ckpts.iterdir())
    assert names == ["epoch=0-step=2.ckpt", "epoch=0-step=4.ckpt"], names
    found = latest(tmp_path)
    assert found.checkpoint is not None and found.checkpoint.path == ckpts / names[1]
    assert found.checkpoint.format is Format.LIGHTNING
    for keep in (0.5, 0.0):
        shutil.copy(ckpts / names[1], tmp_path / "whole.ckpt.bak")
        truncate(ckpts / names[1], keep)
        found = latest(tmp_path)
        assert found.checkpoint is not None and found.checkpoint.path == ckpts / names[0], keep
        shutil.move(tmp_path / "whole.ckpt.bak", ckpts / names[1])


# -- torch.distributed.checkpoint and FSDP ----------------------------------------------------
def test_dcp_saves_and_a_missing_shard_or_metadata(tmp_path: Path) -> None:
    import torch.distributed.checkpoint as dcp

    for step in (10, 20):
        state = {"w": torch.full((256,), float(step)), "b": torch.zeros(3)}
        dcp.save(state, checkpoint_id=str(tmp_path / f"step_{step}"))
    assert chosen(tmp_path) == "step_20"
    assert latest(tmp_path).checkpoint.format is Format.DCP  # type: ignore[union-attr]
    shard = next(p.name for p in (tmp_path / "step_20").glob("*.distcp"))
    cuts_fall_back(
        tmp_path,
        "step_20",
        "step_10",
        {
            ".metadata not written yet": lambda p: (p / ".metadata").unlink(),
            "a shard gone": lambda p: (p / shard).unlink(),
            ".metadata half written": lambda p: truncate(p / ".metadata", 0.5),
        },
    )
    # slurmpre's own name counts only through slurmpre's commit: a bare DCP save there is
    # passed over, with a reason that says what to do.
    before = chosen(tmp_path)
    dcp.save({"w": torch.zeros(256)}, checkpoint_id=str(tmp_path / "step-00000030"))
    found = latest(tmp_path)
    assert found.checkpoint is not None and found.checkpoint.path.name == before
    assert "save through slurmpre.checkpoint()" in found.skipped[0].reason


# Left to interpreter exit, gloo's threads can be torn down while joinable: a process aborts
# ("terminate called without an active exception", SIGABRT) after its saves are written.
# Seen in CI under DeepSpeed ZeRO-3 (there in 2 runs of 15 even with the group destroyed),
# and once with FSDP. The saves are done and both processes have passed the barrier, so the
# interpreter's own teardown is skipped.
END_WITHOUT_TEARDOWN = """
import os, sys
import torch.distributed
torch.distributed.barrier()
torch.distributed.destroy_process_group()
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
"""


def run_on_two_processes(script: str, out: Path, *args: str) -> None:
    """Run `script` under torchrun, two gloo processes on CPU, given `out` and `args`.

    The script is written to a file beside `out`: run with `-c`, a failure's report from
    torchrun echoes the whole script and pushes the processes' own errors out of view.
    """
    path = out.parent / f"{out.name}-save.py"
    path.write_text(script + END_WITHOUT_TEARDOWN)
    proc = subprocess.run(
        [
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
            "--no-python", sys.executable, str(path), str(out), *args,
        ],
        env={**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-6000:]


FSDP_SAVE = r"""
import pickle, sys
from pathlib import Path
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

dist.init_process_group("gloo")
rank = dist.get_rank()
mesh = init_device_mesh("cpu", (dist.get_world_size(),))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 1))
for layer in model:
    fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
out = Path(sys.argv[1])
for n in (0, 1):
    model(torch.randn(4, 64)).sum().backward()
    optimizer.step()
    # What Accelerate's save_state (FSDP, SHARDED_STATE_DICT) writes, in its order and with
    # its calls: the model, then the optimizer, each a DCP folder; each process's random
    # states last. The Trainer's checkpoint-N holds the same two folders, its
    # trainer_state.json written by process 0 after them.
    for folder, last in ((out / "accelerate" / f"checkpoint_{n}", "random_states"),
                         (out / "trainer" / f"checkpoint-{n + 1}", "trainer_state")):
        dcp.save({"model": get_model_state_dict(model)},
                 storage_writer=dcp.FileSystemWriter(str(folder / "pytorch_model_fsdp_0")))
        dcp.save({"optimizer": get_optimizer_state_dict(model, optimizer)},
                 storage_writer=dcp.FileSystemWriter(str(folder / "optimizer_0")))
        if last == "random_states":
            (folder / f"random_states_{rank}.pkl").write_bytes(pickle.dumps(torch.get_rng_state()))
        elif rank == 0:
            (folder / "trainer_state.json").write_text('{"global_step": %d}' % (n + 1))
        dist.barrier()
"""


@pytest.fixture(scope="module")
def fsdp_saves(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two saves of a model sharded with FSDP (fully_shard) over two processes on gloo."""
    out = tmp_path_factory.mktemp("fsdp")
    run_on_two_processes(FSDP_SAVE, out)
    return out


@pytest.mark.parametrize(
    ("layout", "newest", "older", "last"),
    [
        ("accelerate", "checkpoint_1", "checkpoint_0", "random_states_0.pkl"),
        ("trainer", "checkpoint-2", "checkpoint-1", "trainer_state.json"),
    ],
)
def test_fsdp_sharded_saves_and_their_cuts(
    fsdp_saves: Path, tmp_path: Path, layout: str, newest: str, older: str, last: str
) -> None:
    folder = tmp_path / layout
    shutil.copytree(fsdp_saves / layout, folder)
    model = folder / newest / "pytorch_model_fsdp_0"
    shards = sorted(p.name for p in model.glob("*.distcp"))
    assert len(shards) == 2, shards  # one per process: really sharded
    found = latest(folder)
    assert found.checkpoint is not None and found.checkpoint.path.name == newest
    assert "FSDP" in found.checkpoint.reason
    cuts_fall_back(
        folder,
        newest,
        older,
        {
            "its last file not written yet": lambda p: (p / last).unlink(),
            "the model's .metadata not written yet": lambda p: (
                p / "pytorch_model_fsdp_0" / ".metadata"
            ).unlink(),
            "a model shard gone": lambda p: (p / "pytorch_model_fsdp_0" / shards[1]).unlink(),
            "the optimizer's .metadata not written yet": lambda p: (
                p / "optimizer_0" / ".metadata"
            ).unlink(),
        },
    )


# -- DeepSpeed ZeRO ---------------------------------------------------------------------------
DS_SAVE = r"""
import sys
import torch
import deepspeed
import deepspeed.ops

out, stage = sys.argv[1], int(sys.argv[2])
# DeepSpeed on CPU compiles a shared-memory all-reduce op (C++) the first time a process
# group starts: a minute and more here. GPU clusters never build it, and gloo does its work.
deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
deepspeed.init_distributed(dist_backend="gloo")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 1))
config = {
    "train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": stage},
    "zero_allow_untested_optimizer": True, "steps_per_print": 10**9,
}
engine, *_ = deepspeed.initialize(
    model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), config=config
)
for step in (1, 2):
    engine.backward(engine(torch.randn(4, 64)).sum())
    engine.step()
    engine.save_checkpoint(out, tag=f"global_step{step}")  # `latest` is written last
"""


@pytest.mark.parametrize("stage", [2, 3])
def test_deepspeed_zero_saves_and_their_cuts(tmp_path: Path, stage: int) -> None:
    """DeepSpeed's own save_checkpoint, ZeRO-2 and ZeRO-3 over two gloo processes on CPU."""
    pytest.importorskip("deepspeed")
    run_on_two_processes(DS_SAVE, tmp_path, str(stage))
    assert (tmp_path / "latest").read_text().strip() == "global_step2"
    optim = sorted(p.name for p in (tmp_path / "global_step2").glob("*optim_states.pt"))
    assert len(optim) == 2, optim  # one ZeRO shard per process
    found = latest(tmp_path)
    assert found.checkpoint is not None and found.checkpoint.path.name == "global_step2"
    assert found.checkpoint.format is Format.DEEPSPEED

    cuts = {
        # DeepSpeed's process 0 writes `latest` once its own files are written, without
        # waiting for the others: another process's shard can still be half written.
        "another process's ZeRO shard half written": lambda p: truncate(p / optim[1], 0.5),
        "a ZeRO shard empty": lambda p: truncate(p / optim[0], 0),
        "the model states half written": lambda p: [
            truncate(m, 0.5) for m in p.glob("*model_states.pt")
        ],
        "`latest` not moved yet": lambda p: (p.parent / "latest").write_text("global_step1"),
    }
    if stage == 3:  # each process's model states name the processes: one gone shows
        cuts["another process's ZeRO shard gone"] = lambda p: (p / optim[1]).unlink()
    cuts_fall_back(tmp_path, "global_step2", "global_step1", cuts, reset=reset_latest)


def reset_latest(folder: Path) -> None:
    (folder / "latest").write_text("global_step2")
