"""`slurmpre.checkpoint()` across several processes without torch.distributed.

Real processes, as the plain launcher runs them (one per node, ranks from
``SLURM_PROCID``/``SLURM_NTASKS``) or as a launcher that sets ``RANK``/``WORLD_SIZE``;
they meet through marks in the shared folder.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
import slurmpre
from slurmpre.errors import CheckpointError
from slurmpre.folder import checkpoints
from slurmpre.folder.ledger import Ledger

from tests.records import dicts

WORKER = r"""
import json, os, random, sys, time
import slurmpre

folder = sys.argv[1]
steps, seed, fail_at, fail_rank = map(int, sys.argv[2:6])
rank, world = slurmpre.ranks()
rng = random.Random(seed * 100 + rank)
outcomes = []
for step in range(steps):
    try:
        with slurmpre.checkpoint(step, folder, timeout=float(os.environ.get("T", "60"))) as path:
            time.sleep(rng.uniform(0, 0.01))
            if step == fail_at and rank == fail_rank:
                raise RuntimeError("disk full on this rank")
            (path / f"shard-{rank}").write_text(f"{step} {rank}")
        outcomes.append("ok")
    except Exception as exc:
        outcomes.append(f"{type(exc).__name__}: {exc}")
print(json.dumps({"rank": rank, "world": world, "outcomes": outcomes}))
"""


def run_ranks(
    folder: Path,
    *,
    world: int,
    steps: int,
    seed: int,
    fail_at: int = -1,
    fail_rank: int = -1,
    keys: tuple[str, str] = ("RANK", "WORLD_SIZE"),
    timeout: float = 60,
    skip_rank: int | None = None,
) -> list[dict[str, object]]:
    procs = []
    args = (steps, seed, fail_at, fail_rank)
    for rank in range(world):
        if rank == skip_rank:
            continue
        env = {**os.environ, keys[0]: str(rank), keys[1]: str(world), "T": str(timeout)}
        for key in ("SLURMPRE_JOB_TAG", "RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
            if key not in keys:
                env.pop(key, None)
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", WORKER, str(folder), *map(str, args)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
        )
    out = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=timeout * steps + 120)
        assert proc.returncode == 0, stderr
        out.append(json.loads(stdout))
    return out


def test_four_processes_checkpoint_together_fifty_times(tmp_path: Path, seed: int) -> None:
    keys = random.Random(seed).choice([("RANK", "WORLD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS")])
    results = run_ranks(tmp_path, world=4, steps=50, seed=seed, keys=keys)
    assert all(r["outcomes"] == ["ok"] * 50 for r in results), results
    for step in range(50):
        folder = tmp_path / checkpoints.step_dir_name(step)
        shards = sorted(p.name for p in folder.iterdir() if p.name.startswith("shard-"))
        assert shards == [f"shard-{r}" for r in range(4)], (step, shards)
        assert (folder / "shard-2").read_text() == f"{step} 2"
    latest = checkpoints.latest(tmp_path).checkpoint
    assert latest is not None and latest.step == 49


def test_an_exception_on_one_rank_aborts_the_checkpoint_on_all(tmp_path: Path) -> None:
    started = time.monotonic()
    results = run_ranks(tmp_path, world=4, steps=3, seed=1, fail_at=1, fail_rank=2, timeout=30)
    assert time.monotonic() - started < 30  # nobody waited out the timeout
    for r in results:
        outcomes = r["outcomes"]
        assert isinstance(outcomes, list)
        assert outcomes[0] == "ok" and outcomes[2] == "ok"
        if r["rank"] == 2:
            assert outcomes[1] == "RuntimeError: disk full on this rank"
        else:
            assert outcomes[1].startswith("CheckpointError: "), outcomes[1]
    assert not (tmp_path / checkpoints.step_dir_name(1)).exists()
    # While step 1 failed, step 0 stayed the latest; step 2 then committed whole.
    assert sorted(p.name for p in (tmp_path / "step-00000002").iterdir() if "shard" in p.name) == [
        f"shard-{r}" for r in range(4)
    ]


def test_a_rank_that_never_comes_makes_the_others_give_up_after_the_timeout(
    tmp_path: Path,
) -> None:
    started = time.monotonic()
    results = run_ranks(tmp_path, world=3, steps=1, seed=2, timeout=3, skip_rank=1)
    took = time.monotonic() - started
    assert 3 <= took < 30
    assert all(str(r["outcomes"][0]).startswith("CheckpointError") for r in results)  # type: ignore[index]
    assert checkpoints.latest(tmp_path).checkpoint is None


def test_an_empty_checkpoint_is_refused_and_the_previous_stays_latest(tmp_path: Path) -> None:
    with slurmpre.checkpoint(3, tmp_path) as path:
        (path / "w").write_text("3")
    with (
        pytest.raises(CheckpointError, match="the checkpoint of step 4 is empty"),
        slurmpre.checkpoint(4, tmp_path),
    ):
        pass
    latest = checkpoints.latest(tmp_path).checkpoint
    assert latest is not None and latest.step == 3


@pytest.mark.parametrize("step", [1.5, "7", True, -1, None])
def test_a_step_must_be_a_whole_number(tmp_path: Path, step: object) -> None:
    with (
        pytest.raises(CheckpointError, match="checkpoint step must be"),
        slurmpre.checkpoint(step, tmp_path),  # type: ignore[arg-type]
    ):
        pass
    assert list(tmp_path.iterdir()) == []


def test_leftovers_of_dead_attempts_are_cleaned_and_a_sealed_one_is_published(
    tmp_path: Path,
) -> None:
    with checkpoints.writing(tmp_path, 5) as p:
        (p / "w").write_text("5")
    dead = [
        ".incoming-step-00000006-12-0-n3",
        ".incoming-step-00000006-12-0-n3.stale-123",
        ".sync.incoming-step-00000006-12-0-n3",
        ".partial-step-00000004-1700000000000",
        ".duplicate-step-00000005-1700000000000",
    ]
    for name in dead:
        (tmp_path / name).mkdir()
        (tmp_path / name / "x").write_text("x")
    live = tmp_path / ".incoming-step-00000007-12-1-n1"
    live.mkdir()
    # Sealed by a commit that a kill stopped just before its rename.
    sealed = tmp_path / ".incoming-step-00000008-12-0-n4"
    sealed.mkdir()
    (sealed / "w").write_text("8")
    manifest = {"step": 8, "committed_at": 1.0, "files": {"w": 1}}
    (sealed / checkpoints.MARKER).write_text(json.dumps(manifest))
    other = tmp_path / "notes"
    other.mkdir()

    cleaned = checkpoints.clean_leftovers(tmp_path, live="12-1-")
    assert sorted(cleaned.removed) == sorted(dead)
    assert cleaned.published == (str(tmp_path / "step-00000008"),)
    assert live.is_dir() and other.is_dir() and (tmp_path / "step-00000005").is_dir()
    latest = checkpoints.latest(tmp_path).checkpoint
    assert latest is not None and latest.step == 8


def _env(folder: Path) -> dict[str, str]:
    return {"SLURMPRE_CHECKPOINT_DIR": str(folder), "SLURMPRE_JOB_TAG": "9"}


def _hf(folder: Path, step: int, *, weights: bytes = b"w") -> Path:
    path = folder / f"checkpoint-{step}"
    path.mkdir()
    (path / "trainer_state.json").write_text("{}")
    (path / "model.safetensors").write_bytes(weights)
    return path


def test_committed_records_a_frameworks_complete_checkpoint(tmp_path: Path) -> None:
    Ledger(tmp_path).ensure()
    path = _hf(tmp_path, 30)
    assert slurmpre.committed(str(path), env=_env(tmp_path)) == path
    (record,) = [r for r in dicts(Ledger(tmp_path)) if r["event"] == "checkpoint"]
    assert (record["step"], record["path"], record["job"]) == (30, str(path), "9")
    assert "seconds" not in record  # slurmpre did not time another's save


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda f: _hf(f, 5, weights=b""),
            r"not a complete checkpoint: partial: model.safetensors is empty",
        ),
        (lambda f: f / "checkpoint-6", r"does not exist"),
        (lambda f: _hf(f.parent, 7), r"is not in the checkpoint folder"),
    ],
)
def test_committed_refuses_what_the_next_attempt_could_not_resume_from(
    tmp_path: Path, make: object, message: str
) -> None:
    folder = tmp_path / "ckpt"
    folder.mkdir()
    Ledger(folder).ensure()
    path = make(folder)  # type: ignore[operator]
    with pytest.raises(CheckpointError, match=message):
        slurmpre.committed(path, env=_env(folder))
    assert [r for r in dicts(Ledger(folder)) if r["event"] == "checkpoint"] == []


def test_an_in_place_step_names_its_checkpoints_after_its_own_attempt(tmp_path: Path) -> None:
    """Step 0.1's in-flight names start with the prefix the wrapper keeps as live, and the
    leftovers of step 0 do not (so the next step clears them)."""
    from slurmpre import api
    from slurmpre.job.start.env import JobEnv
    from slurmpre.job.start.resume import attempt_prefix

    job = JobEnv("7", 0, 0, ("n1",), "n1", 0, in_place=1)
    env = {"SLURMPRE_JOB_TAG": "7", "SLURMPRE_RESTART_COUNT": "0", "SLURMPRE_IN_PLACE": "1"}
    assert api.saving._attempt_tag(env, tmp_path).startswith(attempt_prefix(job))
    before = {**env, "SLURMPRE_IN_PLACE": "0"}
    assert not api.saving._attempt_tag(before, tmp_path).startswith(attempt_prefix(job))
