"""The Hugging Face Trainer with SlurmpreCallback: on a notice it saves and stops, the
save is reported to slurmpre's watcher, and the next attempt resumes to the same
weights as a run that was never interrupted. In-process, no sandbox: the notice is
the file slurmpre's watcher writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import transformers
from slurmpre import errors as slurmpre_errors
from slurmpre.folder import checkpoints
from slurmpre.folder.layout import FolderLayout
from slurmpre.folder.ledger import Ledger
from slurmpre.integrations.hf import SlurmpreCallback, resume_from_checkpoint

from tests.conftest import as_a_job
from tests.records import dicts

STEPS = 24


class Tiny(torch.nn.Module):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)

    def forward(self, x: Any, labels: Any) -> dict[str, Any]:
        return {"loss": torch.nn.functional.mse_loss(self.lin(x).squeeze(-1), labels)}


def data() -> list[dict[str, Any]]:
    g = torch.Generator().manual_seed(0)
    xs = torch.randn(64, 4, generator=g)
    ys = xs.sum(-1)
    return [{"x": xs[i], "labels": ys[i]} for i in range(64)]


# The notice file as slurmpre's watcher writes it: on a drain with nothing on its way
# (stop at once), with a successor on its way (save and train on), and when it is ready.
DRAIN = '{"kind": "drain"}'
GO_ON = '{"kind": "drain", "stop": false}'
STOP = '{"kind": "drain", "stop": true}'


class NoticeAt(transformers.TrainerCallback):  # type: ignore[misc]
    """What slurmpre's watcher does: write the notice file, here at the steps given."""

    def __init__(self, path: Path, notices: dict[int, str]) -> None:
        self.path, self.notices = path, notices

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if state.global_step in self.notices:
            self.path.write_text(self.notices[state.global_step])


def train(out: Path, callbacks: list[Any], resume: str | None = None) -> Any:
    transformers.set_seed(0)
    model = Tiny()
    args = transformers.TrainingArguments(
        output_dir=str(out), max_steps=STEPS, per_device_train_batch_size=4, learning_rate=0.05,
        save_strategy="steps", save_steps=10, logging_strategy="no", report_to=[],
        use_cpu=True, seed=0, dataloader_num_workers=0,
    )  # fmt: skip
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=data(), callbacks=callbacks
    )
    trainer.train(resume_from_checkpoint=resume)
    return trainer.state.global_step, {k: v.clone() for k, v in model.state_dict().items()}


def test_a_notice_saves_stops_reports_and_the_resume_ends_identical(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, reference = train(tmp_path / "uninterrupted", [])

    folder = tmp_path / "job"
    folder.mkdir()
    Ledger(folder).ensure()
    notice = as_a_job(monkeypatch, folder, "7")
    stopped_at, _ = train(folder, [NoticeAt(notice, {13: DRAIN}), SlurmpreCallback()])
    assert stopped_at == 13  # saved and stopped at the step the notice was seen
    assert (
        FolderLayout(folder).listening("7", 0).exists()
    )  # the watcher waits for this script's save
    records = [r for r in dicts(Ledger(folder)) if r["event"] == "checkpoint"]
    # Every save is reported; the one on the notice is what the watcher requeues after.
    assert [(r["step"], r["after_notice"]) for r in records] == [(10, False), (13, True)]
    assert records[-1]["path"] == str(folder / "checkpoint-13")

    # The next attempt: slurmpre's wrapper chose the newest complete checkpoint.
    chosen = checkpoints.latest(folder).checkpoint
    assert chosen is not None and chosen.where == str(folder / "checkpoint-13")
    monkeypatch.setenv("SLURMPRE_RESUME_FROM", chosen.where)
    as_a_job(monkeypatch, folder, "7", attempt=1)  # the next attempt: no notice yet
    assert resume_from_checkpoint() == chosen.where
    steps, resumed = train(folder, [SlurmpreCallback()], resume=resume_from_checkpoint())
    assert steps == STEPS
    assert all(torch.equal(resumed[k], reference[k]) for k in reference)


def test_an_output_dir_that_is_not_the_jobs_folder_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURMPRE_CHECKPOINT_DIR", str(tmp_path / "job"))
    with pytest.raises(Exception, match="is not the job's checkpoint folder"):
        train(tmp_path / "elsewhere", [SlurmpreCallback()])


def test_with_a_successor_on_its_way_it_saves_trains_on_and_saves_again_to_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, reference = train(tmp_path / "uninterrupted", [])
    folder = tmp_path / "job"
    folder.mkdir()
    Ledger(folder).ensure()
    notice = as_a_job(monkeypatch, folder, "7")
    stopped_at, _ = train(folder, [NoticeAt(notice, {12: GO_ON, 17: STOP}), SlurmpreCallback()])
    assert stopped_at == 17  # it trained on after its notice checkpoint
    saves = [(r["step"], r["after_notice"]) for r in dicts(Ledger(folder))
             if r["event"] == "checkpoint"]  # fmt: skip
    assert saves == [(10, False), (12, True), (17, True)]
    chosen = checkpoints.latest(folder).checkpoint
    assert chosen is not None and chosen.where == str(folder / "checkpoint-17")
    as_a_job(monkeypatch, folder, "7", attempt=1)  # the next attempt: no notice yet
    steps, resumed = train(folder, [SlurmpreCallback()], resume=chosen.where)
    assert steps == STEPS
    assert all(torch.equal(resumed[k], reference[k]) for k in reference)


def test_the_callback_keeps_the_global_batch_by_setting_the_accumulation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """global_batch=16 on one rank of per_device_train_batch_size=4: 4 micro batches per
    step, and the training is the one with that accumulation set by hand."""

    def run(out: Path, accumulation: int, callbacks: list[Any]) -> Any:
        transformers.set_seed(0)
        model = Tiny()
        args = transformers.TrainingArguments(
            output_dir=str(out), max_steps=6, per_device_train_batch_size=4, learning_rate=0.05,
            gradient_accumulation_steps=accumulation, save_strategy="no", logging_strategy="no",
            report_to=[], use_cpu=True, seed=0, dataloader_num_workers=0,
        )  # fmt: skip
        trainer = transformers.Trainer(
            model=model, args=args, train_dataset=data(), callbacks=callbacks
        )
        trainer.train()
        return args.gradient_accumulation_steps, model.state_dict()

    by_hand, expected = run(tmp_path / "a", 4, [])
    got, weights = run(tmp_path / "b", 1, [SlurmpreCallback(global_batch=16)])
    assert got == by_hand == 4
    assert all(torch.equal(weights[k], expected[k]) for k in expected)
    assert "gradient_accumulation_steps 4 (was 1)" in capsys.readouterr().err
    with pytest.raises(slurmpre_errors.UsageError, match="global_batch=18"):
        run(tmp_path / "c", 1, [SlurmpreCallback(global_batch=18)])
