"""The code a job runs (#23 item 2): its identity at submit, and snapshot = "git"."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from slurmpre.errors import UsageError
from slurmpre.folder import access
from slurmpre.gitstate import git_state
from slurmpre.login import code
from slurmpre.login.render import render
from slurmpre.login.spec import SpecError, validate
from slurmpre.login.status import AttemptRow, JobStatus, lines

pytestmark = pytest.mark.skipif(
    subprocess.run(["git", "--version"], capture_output=True).returncode != 0,
    reason="git is not installed",
)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    git(repo, "init", "-q")
    (repo / "train.py").write_text("print('train')\n")
    (repo / "run.sh").write_text("#!/bin/sh\n")
    (repo / "run.sh").chmod(0o755)
    (repo / "src" / "model.py").write_text("W = 1\n")
    (repo / ".gitignore").write_text("outputs/\n*.log\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "one")
    (repo / "notes.txt").write_text("untracked, not ignored\n")
    (repo / "outputs").mkdir()
    (repo / "outputs" / "ckpt.bin").write_bytes(b"x" * 100)
    (repo / "train.log").write_text("ignored\n")
    return repo


def test_identity_is_the_commit_and_whether_the_tree_differs(repo: Path) -> None:
    head = git(repo, "rev-parse", "HEAD")
    assert code.identify(repo).identity == f"git {head[:12]} (dirty)"  # notes.txt
    (repo / "notes.txt").unlink()
    assert code.identify(repo / "src").identity == f"git {head[:12]}"
    assert code.identify(repo.parent).identity is None  # no work tree: nothing to say
    state = git_state(repo)
    assert state is not None and state.root == repo.resolve() and state.commit == head


def test_a_snapshot_copies_what_git_shows_once_and_starts_where_you_submitted(
    repo: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_text("never read\n")
    (repo / "link").symlink_to(outside)  # untracked link out of the tree: copied as a link
    ck = tmp_path / "ck"
    first = code.snapshot(repo / "src", ck, 10, access.OWNER)
    assert first.root is not None and first.workdir == f"{first.root}/src"
    root = Path(first.root)
    assert root.parent == ck / ".slurmpre" / "code"
    copied = sorted(str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir())
    assert copied == [".gitignore", "link", "notes.txt", "run.sh", "src/model.py", "train.py"]
    assert (root / "link").is_symlink() and (root / "link").readlink() == outside
    assert os.access(root / "run.sh", os.X_OK)
    assert (
        first.identity
        == f"snapshot {root.name} of git {git(repo, 'rev-parse', 'HEAD')[:12]} (dirty)"
    )
    again = code.snapshot(repo, ck, 10, access.OWNER)  # the same code: the same copy
    assert again.root == first.root
    (repo / "src" / "model.py").write_text("W = 2\n")
    changed = code.snapshot(repo, ck, 10, access.OWNER)
    assert changed.root != first.root and (root / "src" / "model.py").read_text() == "W = 1\n"
    assert sorted(p.name for p in (ck / ".slurmpre" / "code").iterdir()) == sorted(
        [root.name, Path(changed.root or "").name]
    )  # no half-made copy left behind


def test_a_snapshot_past_its_limit_is_refused_naming_the_largest_files(
    repo: Path, tmp_path: Path
) -> None:
    (repo / "weights.pt").write_bytes(b"w" * 1_500_000)
    with pytest.raises(UsageError) as err:
        code.snapshot(repo, tmp_path / "ck", 1, access.OWNER)
    message = str(err.value)
    assert "come to 1.5 MB, over snapshot_max_mb = 1 (largest: weights.pt 1.5 MB" in message
    assert "\n" not in message
    assert not (tmp_path / "ck" / ".slurmpre" / "code").exists()  # nothing copied


def test_a_snapshot_outside_a_work_tree_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="is not in a git work tree"):
        code.snapshot(tmp_path, tmp_path / "ck", 10, access.OWNER)


BASE = {"name": "job", "command": ["python", "train.py"], "checkpoint_dir": "/ck"}


def test_the_script_runs_from_the_copy_and_says_which_code(tmp_path: Path) -> None:
    spec = validate({**BASE, "snapshot": "git"}, user="alice", python="/venv/bin/python")
    made = code.Code(
        "snapshot abc of git 123", "/ck/.slurmpre/code/abc", "/ck/.slurmpre/code/abc/src"
    )
    script = render(spec, made)
    assert "#SBATCH --chdir=/ck/.slurmpre/code/abc/src\n" in script
    assert "export SLURMPRE_CODE='snapshot abc of git 123'\n" in script
    assert "export SLURMPRE_CODE_DIR=/ck/.slurmpre/code/abc\n" in script
    assert "SNAPSHOT-MADE-AT-SUBMIT" in render(spec)  # a render alone cannot know the copy
    plain = validate(BASE, user="alice", python="/venv/bin/python")
    assert "--chdir" not in render(
        plain, code.Code("git 123")
    ) and "SLURMPRE_CODE_DIR" not in render(plain)
    with pytest.raises(SpecError, match="snapshot = 'git' runs the job from its copy"):
        validate({**BASE, "snapshot": "git", "extra_sbatch": ["--chdir=/x"]}, user="alice")
    with pytest.raises(SpecError, match=r"snapshot = 'svn': must be 'none' or 'git'"):
        validate({**BASE, "snapshot": "svn"}, user="alice")


def test_status_names_the_code_of_each_attempt_where_it_changes() -> None:
    def row(attempt: int, code_id: str | None) -> AttemptRow:
        return AttemptRow(attempt, ("n1",), 0.0, 1.0, "completed", None, None, None, None, None,
                          None, None, code=code_id)  # fmt: skip

    st = JobStatus(
        job="7", name="n", checkpoint_dir="/ck", state="COMPLETED", restarts=2,
        attempts=[row(0, "git aaa"), row(1, "git aaa"), row(2, "git bbb")],
    )  # fmt: skip
    text = "\n".join(lines(st))
    assert text.count("code: git aaa") == 1
    assert "code: git bbb (not the code of the attempt above)" in text


def test_git_that_cannot_answer_in_time_says_nothing_rather_than_clean(repo: Path) -> None:
    assert git_state(repo, timeout=1e-6) is None  # the wrapper keeps the submit's identity
    assert git_state(repo) is not None


# -- the snapshot is the owner's (#35) --------------------------------------------------
def test_the_snapshot_is_the_owners_alone_under_group_access(repo: Path, tmp_path: Path) -> None:
    made = code.snapshot(repo, tmp_path / "ck", 10, access.GROUP)
    root = Path(made.root or "")
    for path in [root.parent, root, *root.rglob("*")]:
        if not path.is_symlink():
            assert path.stat().st_mode & 0o077 == 0, path
    assert (root / "run.sh").stat().st_mode & 0o777 == 0o700  # executable, the owner's


def test_the_snapshot_leaves_out_the_jobs_own_folders_and_credentials(
    repo: Path, tmp_path: Path
) -> None:
    """A checkpoint folder inside the work tree was copied (and grew at every submit); a
    work tree that is $HOME copied ~/.ssh."""
    for secret in (".ssh/id_ed25519", ".gnupg/secring.gpg", ".aws/credentials", ".netrc",
                   "sub/.ssh/config", ".config/gcloud/credentials.db"):  # fmt: skip
        (repo / secret).parent.mkdir(parents=True, exist_ok=True)
        (repo / secret).write_text("secret\n")
    ck, logs = repo / "ckpt", repo / "logs"
    for f in (ck / "step-00000001" / "w.pt", logs / "job-1.out"):
        f.parent.mkdir(parents=True)
        f.write_text("x\n")
    made = code.snapshot(repo, ck, 10, access.OWNER, log_dir=logs)
    root = Path(made.root or "")
    copied = sorted(str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir())
    assert copied == [".gitignore", "notes.txt", "run.sh", "src/model.py", "train.py"]
    again = code.snapshot(repo, ck, 10, access.OWNER, log_dir=logs)
    assert again.root == made.root  # it does not grow with the folders it now holds


def test_a_failed_snapshot_leaves_nothing_behind(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []

    def breaks(src: Path, dst: Path, mode: int) -> None:
        calls.append(src)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        dst.write_bytes(src.read_bytes())

    monkeypatch.setattr(code, "_copy", breaks)
    with pytest.raises(OSError, match="No space left"):
        code.snapshot(repo, tmp_path / "ck", 10, access.OWNER)
    assert list((tmp_path / "ck" / ".slurmpre" / "code").iterdir()) == []


@pytest.mark.parametrize("tamper", ["content", "mode", "owner", "new file"])
def test_an_attempt_refuses_a_snapshot_changed_since_submit(
    repo: Path, tmp_path: Path, tamper: str
) -> None:
    from slurmpre.errors import JobEnvironmentError
    from slurmpre.folder import snapshot

    root = Path(code.snapshot(repo, tmp_path / "ck", 10, access.OWNER).root or "")
    snapshot.verify(root)  # as submitted: fine
    model = root / "src" / "model.py"
    if tamper == "content":
        model.chmod(0o600)
        model.write_text("import os; os.system('evil')\n")
    elif tamper == "mode":
        model.chmod(0o664)
    elif tamper == "owner":
        os.chown(model, 65534, -1)
    else:
        (root / "src" / "sitecustomize.py").write_text("evil\n")
    with pytest.raises(JobEnvironmentError, match="snapshot"):
        snapshot.verify(root)


def test_node_0_refuses_a_changed_snapshot_before_it_chooses_a_checkpoint(
    repo: Path, tmp_path: Path
) -> None:
    from slurmpre import environment
    from slurmpre.errors import JobEnvironmentError
    from slurmpre.folder.ledger import Ledger
    from slurmpre.job.start.args import parse_args
    from slurmpre.job.start.env import JobEnv
    from slurmpre.job.start.resume import AttemptContext, agree

    from tests.fakes import Jobs

    ck = tmp_path / "ck"
    root = Path(code.snapshot(repo, ck, 10, access.OWNER).root or "")
    (root / "train.py").chmod(0o600)
    (root / "train.py").write_text("print('not what was submitted')\n")
    ledger = Ledger(ck)
    opts = parse_args(["--checkpoint-dir", str(ck), "--", "python", "train.py"])
    job = JobEnv("42", 0, 0, ("n1",), "n1", 0)
    with pytest.raises(JobEnvironmentError, match="changed since it was submitted"):
        env = {environment.CODE_DIR: str(root)}
        agree(AttemptContext(opts, job, ck, ledger, Jobs({}), env))
    assert not ledger.layout.choice("42", "0").exists()  # nothing chosen, nothing runs
