"""Lightning with SlurmpreCallback: on a notice it saves into the job's folder and
stops, the save is reported to slurmpre's watcher, and the next attempt resumes from
it and trains to the end. In-process, no sandbox: the notice is the file slurmpre's
watcher writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as L
import pytest
import torch
from slurmpre.errors import UsageError
from slurmpre.folder import checkpoints
from slurmpre.folder.checkpoints import Format
from slurmpre.folder.ledger import Ledger
from slurmpre.integrations.lightning import SlurmpreCallback, resume_from_checkpoint

from tests.conftest import as_a_job
from tests.records import dicts

STEPS = 24


class Tiny(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        return torch.nn.functional.mse_loss(self.lin(x).squeeze(-1), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def loader() -> Any:
    g = torch.Generator().manual_seed(0)
    xs = torch.randn(64, 4, generator=g)
    return torch.utils.data.DataLoader(
        list(zip(xs, xs.sum(-1), strict=True)), batch_size=4, shuffle=False
    )


# The notice file as slurmpre's watcher writes it: on a drain with nothing on its way
# (stop at once), with a successor on its way (save and train on), and when it is ready.
DRAIN = '{"kind": "drain"}'
GO_ON = '{"kind": "drain", "stop": false}'
STOP = '{"kind": "drain", "stop": true}'


class NoticeAt(L.Callback):
    """What slurmpre's watcher does: write the notice file, here after the batches given."""

    def __init__(self, path: Path, notices: dict[int, str]) -> None:
        self.path, self.notices = path, notices

    def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
        if trainer.global_step in self.notices:
            self.path.write_text(self.notices[trainer.global_step])


def fit(root: Path, callbacks: list[Any], ckpt_path: str | None = None) -> tuple[int, Any]:
    L.seed_everything(0, verbose=False)
    model = Tiny()
    trainer = L.Trainer(
        default_root_dir=str(root), max_steps=STEPS, accelerator="cpu", devices=1,
        callbacks=callbacks, logger=False, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False,
    )  # fmt: skip
    trainer.fit(model, loader(), ckpt_path=ckpt_path)
    return trainer.global_step, {k: v.clone() for k, v in model.state_dict().items()}


def test_a_notice_saves_stops_reports_and_the_resume_trains_to_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "job"
    folder.mkdir()
    Ledger(folder).ensure()
    notice = as_a_job(monkeypatch, folder, "7")
    stopped_at, _ = fit(folder, [NoticeAt(notice, {9: DRAIN}), SlurmpreCallback()])
    assert stopped_at == 9
    (record,) = [r for r in dicts(Ledger(folder)) if r["event"] == "checkpoint"]
    assert (record["step"], record["after_notice"]) == (9, True)
    chosen = checkpoints.latest(folder).checkpoint
    assert chosen is not None and chosen.where == str(folder / "step=9.ckpt")
    assert (chosen.format, chosen.complete) == (Format.LIGHTNING, True)

    monkeypatch.setenv("SLURMPRE_RESUME_FROM", chosen.where)
    as_a_job(monkeypatch, folder, "7", attempt=1)  # the next attempt: no notice yet
    steps, _ = fit(folder, [SlurmpreCallback()], ckpt_path=resume_from_checkpoint())
    assert steps == STEPS


def test_with_a_successor_on_its_way_it_saves_trains_on_and_saves_again_to_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, reference = fit(tmp_path / "uninterrupted", [])
    folder = tmp_path / "job"
    folder.mkdir()
    Ledger(folder).ensure()
    notice = as_a_job(monkeypatch, folder, "7")
    # Told to stop at an epoch's end (16 batches): a plain DataLoader resumes exactly only
    # there (Lightning restarts a mid-epoch one's data; docs/how-it-works.md says so).
    stopped_at, _ = fit(folder, [NoticeAt(notice, {6: GO_ON, 16: STOP}), SlurmpreCallback()])
    assert stopped_at == 16  # it trained on after its notice checkpoint
    saves = [(r["step"], r["after_notice"]) for r in dicts(Ledger(folder))
             if r["event"] == "checkpoint"]  # fmt: skip
    assert saves == [(6, True), (16, True)]
    chosen = checkpoints.latest(folder).checkpoint
    assert chosen is not None and chosen.where == str(folder / "step=16.ckpt")
    as_a_job(monkeypatch, folder, "7", attempt=1)  # the next attempt: no notice yet
    steps, resumed = fit(folder, [SlurmpreCallback()], ckpt_path=chosen.where)
    assert steps == STEPS
    assert all(torch.equal(resumed[k], reference[k]) for k in reference)


def test_the_callback_keeps_the_global_batch_by_setting_the_accumulation(tmp_path: Path) -> None:
    """global_batch=16 on one rank of the loader's batch size 4: 4 batches per optimizer
    step, and the training is the one with that accumulation set by hand."""

    def run(root: Path, accumulation: int, callbacks: list[Any]) -> tuple[int, Any]:
        L.seed_everything(0, verbose=False)
        model = Tiny()
        trainer = L.Trainer(
            default_root_dir=str(root), max_steps=4, accelerator="cpu", devices=1,
            callbacks=callbacks, logger=False, enable_progress_bar=False,
            enable_model_summary=False, enable_checkpointing=False,
            accumulate_grad_batches=accumulation,
        )  # fmt: skip
        trainer.fit(model, loader())
        return trainer.accumulate_grad_batches, model.state_dict()

    by_hand, expected = run(tmp_path / "a", 4, [])
    got, weights = run(tmp_path / "b", 1, [SlurmpreCallback(global_batch=16)])
    assert got == by_hand == 4
    assert all(torch.equal(weights[k], expected[k]) for k in expected)
    with pytest.raises(UsageError, match="global_batch=18"):
        run(tmp_path / "c", 1, [SlurmpreCallback(global_batch=18)])
