"""`ckpt prune`: old checkpoints go; the newest complete one, what live jobs resumed from,
what may still be written, and everything during a write stay."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import slurmpre
from slurmpre.errors import CheckpointError, UsageError
from slurmpre.folder.checkpoints import latest, step_dir_name, writing
from slurmpre.folder.ledger import Ledger
from slurmpre.lines import sent_to
from slurmpre.login.prune import prune

from tests.conftest import slurmpre_cli
from tests.fakes import Jobs
from tests.folder.test_owner import DONE, RUNNING
from tests.records import record


def folder_with(tmp_path: Path, steps: list[int], *, partial: list[int] = ()) -> Path:  # type: ignore[assignment]
    folder = tmp_path / "ckpt"
    for step in steps:
        with writing(folder, step) as p:
            (p / "w").write_bytes(b"x" * 1000)
    for step in partial:
        (folder / step_dir_name(step)).mkdir(parents=True)
        (folder / step_dir_name(step) / "w").write_bytes(b"half")
    Ledger(folder).ensure()
    return folder


def start(folder: Path, job: str, resume: int | None) -> None:
    Ledger(folder).append(
        record(
            {
                "event": "start",
                "job": job,
                "attempt": 0,
                "resume_from": None if resume is None else str(folder / step_dir_name(resume)),
            }
        )
    )


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name != ".slurmpre")


def test_keeps_the_newest_n_and_what_live_jobs_need(tmp_path: Path) -> None:
    folder = folder_with(tmp_path, [10, 20, 30, 40, 50], partial=[5, 60])
    start(folder, "7", 20)  # live: it resumed from step 20
    start(folder, "8", 30)  # finished: step 30 can go
    (folder / ".incoming-step-00000055-7-0-n3").mkdir()  # job 7 writes it now
    (folder / ".incoming-step-00000045-8-0-n1").mkdir()  # job 8 died writing it
    (folder / ".partial-step-00000040-1700000000000").mkdir()
    jobs = Jobs({"7": RUNNING, "8": DONE})
    done = prune(folder, 2, jobs)
    assert names(folder) == [
        ".incoming-step-00000055-7-0-n3",
        "step-00000020",
        "step-00000040",
        "step-00000050",
        "step-00000060",
    ]
    why = {e.name: e.why for e in done.removed}
    assert why == {
        "step-00000030": "complete, older than the newest 2 complete",
        "step-00000010": "complete, older than the newest 2 complete",
        "step-00000005": "partial, older than the newest complete checkpoint",
        ".incoming-step-00000045-8-0-n1": "left by a dead attempt",
        ".partial-step-00000040-1700000000000": "left by a dead attempt",
    }
    kept = {e.name: e.why for e in done.kept}
    assert kept["step-00000050"] == "the newest complete checkpoint"
    assert kept["step-00000020"] == "a live job resumed from it"
    assert kept["step-00000060"].startswith("partial, newer than the newest complete")
    assert done.freed >= 2 * 1000
    assert latest(folder).checkpoint.step == 50  # type: ignore[union-attr]


def test_keep_one_still_keeps_the_newest_complete_and_zero_is_refused(tmp_path: Path) -> None:
    folder = folder_with(tmp_path, [1, 2], partial=[3])
    with pytest.raises(UsageError, match="--keep 0"):
        prune(folder, 0, Jobs({}))
    prune(folder, 1, Jobs({}))
    assert names(folder) == ["step-00000002", "step-00000003"]


def test_a_folder_with_only_partial_checkpoints_loses_nothing_but_dead_leftovers(
    tmp_path: Path,
) -> None:
    folder = folder_with(tmp_path, [], partial=[1, 2])
    done = prune(folder, 1, Jobs({}))
    assert done.removed == () and names(folder) == ["step-00000001", "step-00000002"]


def test_dry_run_removes_nothing(tmp_path: Path) -> None:
    folder = folder_with(tmp_path, [1, 2, 3])
    done = prune(folder, 1, Jobs({}), dry_run=True)
    assert [e.name for e in done.removed] == ["step-00000002", "step-00000001"]
    assert names(folder) == ["step-00000001", "step-00000002", "step-00000003"]


def test_a_job_slurm_cannot_judge_counts_as_live(tmp_path: Path) -> None:
    folder = folder_with(tmp_path, [1, 2, 3])
    start(folder, "7", 1)
    said: list[str] = []
    with sent_to(said.append, prune.__module__):
        prune(folder, 1, Jobs({}, down=True))
    assert names(folder) == ["step-00000001", "step-00000003"]
    assert said == ["cannot tell whether job 7 still runs: keeping what it may need"]


def test_nothing_is_removed_while_a_checkpoint_is_being_written(tmp_path: Path) -> None:
    """slurmpre.checkpoint holds the folder's writing lock on rank 0 from its first byte to
    the commit; prune waits for it, and gives up without removing anything."""
    folder = folder_with(tmp_path, [1, 2, 3])
    inside, release = threading.Event(), threading.Event()
    failures: list[BaseException] = []

    def write() -> None:
        try:
            with slurmpre.checkpoint(4, folder) as path:
                (path / "w").write_bytes(b"y")
                inside.set()
                release.wait(60)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)
            inside.set()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert inside.wait(60)
        with pytest.raises(CheckpointError, match="a checkpoint is being written"):
            prune(folder, 1, Jobs({}), wait=0.5)
        assert names(folder)[-3:] == ["step-00000001", "step-00000002", "step-00000003"]
    finally:
        release.set()
        writer.join(60)
    assert not failures
    prune(folder, 1, Jobs({}))
    assert names(folder) == ["step-00000004"]


def test_a_prune_killed_midway_is_finished_by_the_next(tmp_path: Path) -> None:
    folder = folder_with(tmp_path, [1, 2])
    (folder / "step-00000001").rename(folder / ".pruned-step-00000001-1700000000000000000")
    done = prune(folder, 1, Jobs({}))
    assert names(folder) == ["step-00000002"]
    assert [e.name for e in done.removed] == ["step-00000001"]


def test_a_folder_slurmpre_never_wrote_to_is_refused(tmp_path: Path) -> None:
    (tmp_path / "step-00000001").mkdir()
    with pytest.raises(CheckpointError, match="prunes nothing"):
        prune(tmp_path, 1, Jobs({}))


def test_cli_prune_and_verify(tmp_path: Path) -> None:
    folder = folder_with(tmp_path, [1, 2], partial=[3])
    proc = slurmpre_cli("ckpt", "prune", str(folder), "--keep", "1", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "would remove step-00000001 (" in proc.stdout and "would free" in proc.stdout
    assert slurmpre_cli("ckpt", "prune", str(folder), "--keep", "-1").returncode == 2
    missing = slurmpre_cli("ckpt", "prune", str(tmp_path / "nope"), "--keep", "1")
    assert missing.returncode == 1 and len(missing.stderr.splitlines()) == 1
    ok = slurmpre_cli("ckpt", "verify", str(folder / "step-00000002"))
    assert ok.returncode == 0 and ok.stdout.startswith("complete: ")
    bad = slurmpre_cli("ckpt", "verify", str(folder / "step-00000003"))
    assert bad.returncode == 1 and bad.stdout.startswith("INCOMPLETE: ")
    assert "no completion mark" in bad.stderr
    gone = slurmpre_cli("ckpt", "verify", str(folder / "step-00000009"))
    assert gone.returncode == 1 and "does not exist" in gone.stderr


def test_a_job_slurm_knows_no_more_holds_nothing(tmp_path: Path) -> None:
    """Slurm forgot job 9 (its JobNotFound, however scontrol worded it): what it resumed
    from is pruned like any older checkpoint; a job Slurm cannot judge still holds its own."""
    folder = folder_with(tmp_path, [10, 20, 30])
    start(folder, "9", 10)  # gone
    start(folder, "6", 20)  # Slurm does not answer about it
    done = prune(folder, 1, Jobs({}, unanswered={"6"}))
    assert {e.name for e in done.removed} == {"step-00000010"}
    assert {e.name: e.why for e in done.kept}["step-00000020"] == "a live job resumed from it"


def test_lightnings_requeue_saves_are_ordered_by_their_number_not_their_files_times(
    tmp_path: Path,
) -> None:
    """hpc_ckpt_N.ckpt counts SLURMEnvironment's requeue saves. Ordered by mtime, a copy or
    a restore that touched hpc_ckpt_2 made it "newest": resume took it, and prune deleted
    hpc_ckpt_10, the one resume needs (#35)."""
    import os

    from tests.folder.test_checkpoints import lightning

    folder = tmp_path / "ckpt"
    folder.mkdir()
    for n in (1, 2, 9, 10):
        lightning(folder, f"hpc_ckpt_{n}.ckpt")
    os.utime(folder / "hpc_ckpt_2.ckpt", (4e9, 4e9))  # touched last (a copy, a restore)
    os.utime(folder / "hpc_ckpt_10.ckpt", (1e9, 1e9))
    assert latest(folder).checkpoint.name == "hpc_ckpt_10.ckpt"  # type: ignore[union-attr]
    Ledger(folder).ensure()
    done = prune(folder, 2, Jobs({}))
    assert names(folder) == ["hpc_ckpt_10.ckpt", "hpc_ckpt_9.ckpt"]
    assert {e.name for e in done.removed} == {"hpc_ckpt_1.ckpt", "hpc_ckpt_2.ckpt"}
