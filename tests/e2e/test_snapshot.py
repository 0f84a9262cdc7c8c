"""End to end (#23 item 2): the code a restart runs. A job submitted from a git
repository with ``snapshot = "git"`` is drained after its repository was edited and
committed: its successor still runs the code as submitted (from the copy slurmpre
made at submit), and `slurmpre status` names that code for every attempt. The same
job without a snapshot runs the edited code after its restart, and status says which
commit each attempt's submit found."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.sandbox.preempt import PreemptPlan
from slurmpre.slurm.client import CommandLineSlurm

from tests.conftest import slurmpre_cli, wait_for, wait_preemptible_idle
from tests.e2e.helpers import (
    Preemption,
    jsonl,
    ledger,
    logs,
    restore_all,
    successor_of,
    wait_done,
    write_spec,
)
from tests.test_code import git

pytestmark = [pytest.mark.sandbox, pytest.mark.e2e]

TRAIN = """\
import json, os, sys, time
import slurmpre
from version import VERSION

log = sys.argv[1]
start = 0
if slurmpre.resume_path() is not None:
    start = slurmpre.resume_step()
for step in range(start, 16):
    if slurmpre.preemption_requested():
        with slurmpre.checkpoint(step) as path:
            (path / "step").write_text(str(step))
        break
    time.sleep(0.5)
    with open(log, "a") as f:
        f.write(json.dumps({"step": step, "version": VERSION, "cwd": os.getcwd()}) + "\\n")
"""


def repository(folder: Path) -> Path:
    repo = folder / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "train.py").write_text(TRAIN)
    (repo / "version.py").write_text("VERSION = 1\n")
    (repo / ".gitignore").write_text("data/\n")
    (repo / "data").mkdir()
    (repo / "data" / "big.bin").write_bytes(b"x" * 1000)  # ignored: never copied
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "one")
    return repo


@pytest.mark.parametrize("snapshot", ["git", "none"])
def test_a_restart_runs_the_code_as_submitted_only_with_a_snapshot(
    sandbox: Sandbox, tmp_path: Path, snapshot: str
) -> None:
    slurm = CommandLineSlurm()
    wait_preemptible_idle(slurm)
    repo = repository(tmp_path)
    first_commit = git(repo, "rev-parse", "HEAD")
    steps = tmp_path / "steps.jsonl"
    spec = write_spec(
        tmp_path,
        f"code-{snapshot}",
        [sys.executable, "train.py", str(steps)],
        [
            'launcher = "plain"',
            'restart = "successor"',
            "poll_interval = 1",
            f'snapshot = "{snapshot}"',
        ],
        nodes="1",
    )
    submitted = slurmpre_cli("submit", str(spec), check=True, cwd=repo)
    first = submitted.stdout.strip()
    wait_for("three steps", lambda: len(jsonl(steps)) >= 3, timeout=180)
    (repo / "version.py").write_text("VERSION = 2\n")  # edited and committed mid-run
    git(repo, "commit", "-q", "-am", "two")
    (victim,) = slurm.job(first).nodes
    preemption = Preemption(sandbox, PreemptPlan(victim, window=60, return_after=3))
    preemption.start()
    try:
        successor = wait_for("the hand-over", lambda: successor_of(tmp_path), timeout=90)
        wait_done(slurm, successor, tmp_path, timeout=240)
        preemption.finish()
    finally:
        restore_all(sandbox)
    where = logs(tmp_path)[-4000:]
    trained = jsonl(steps)
    assert [t["step"] for t in trained] == list(range(16)), where
    versions = {t["version"] for t in trained}
    starts = [r for r in ledger(tmp_path) if r["event"] == "start"]
    (record,) = [r for r in ledger(tmp_path) if r["event"] == "submitted"]
    if snapshot == "git":
        assert versions == {1}  # the successor ran the copy, not the edited repository
        copy = Path(trained[0]["cwd"])
        assert copy.parent == tmp_path / "ckpt" / ".slurmpre" / "code"
        assert {t["cwd"] for t in trained} == {str(copy)}
        assert sorted(p.name for p in copy.iterdir()) == [".gitignore", "train.py", "version.py"]
        identity = f"snapshot {copy.name} of git {first_commit[:12]}"
        assert f"runs from {identity}, copied to {copy}" in submitted.stderr
        ran = [identity, identity]
    else:
        assert versions == {1, 2}  # the restart ran what the repository held by then
        assert {t["cwd"] for t in trained} == {str(repo)}
        identity = f"git {first_commit[:12]}"
        ran = [identity, f"git {git(repo, 'rev-parse', 'HEAD')[:12]}"]
    assert record["code"] == identity  # what the submit found
    assert [s["code"] for s in starts] == ran, starts  # what each attempt ran
    status = json.loads(slurmpre_cli("status", first, "--json", check=True).stdout)
    assert [a["code"] for a in status["attempts"]] == ran
    text = slurmpre_cli("status", first, check=True).stdout
    assert text.count(f"code: {identity}") == 1, text  # said once per change of code
    if ran[1] != ran[0]:
        assert f"code: {ran[1]} (not the code of the attempt above)" in text, text
