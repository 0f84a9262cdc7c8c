"""Slurm's time-limit warning (SIGUSR2) never kills training, whenever it comes, under both
ways a cluster tracks processes: proctrack/cgroup (GPU clusters) and proctrack/pgid.

Real torchrun on two sandbox nodes; the warning is sent the way Slurm's ``--signal``
sends it, to every step of the job but not the batch shell (``scancel -s USR2``).
Each case waits on conditions the code produces, never on a duration.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.slurm.client import CommandLineSlurm

from tests.conftest import set_tracking, wait_for, wait_preemptible_idle
from tests.e2e.helpers import (
    final_weights,
    ledger,
    logs,
    notices,
    progress,
    same_weights,
    submit,
    wait_done,
)

pytest.importorskip("torch", reason="the e2e extra (torch==2.13.0) is not installed")

pytestmark = [pytest.mark.sandbox, pytest.mark.e2e]

HONOR = ["--honor-notice"]
SIGUSR2_BIT = 1 << (12 - 1)


# proctrack/cgroup is what GPU clusters (the provider's too) run: every case runs under it.
# Under proctrack/pgid the warning reaches only the step's process group; the case that
# warns during training runs there too (the sandbox is restarted for it, once).
CGROUP = pytest.mark.parametrize("tracking", ["cgroup"], indirect=True, scope="module")
BOTH = pytest.mark.parametrize("tracking", ["cgroup", "pgid"], indirect=True, scope="module")


@pytest.fixture(scope="module")
def tracking(request: pytest.FixtureRequest, sandbox: Sandbox) -> Iterator[str]:
    set_tracking(request.param)
    yield request.param
    set_tracking("auto")


def wrappers(ckpt: Path) -> list[int]:
    """The pids of this job's `slurmpre.job run` processes (one per node)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        wanted = f"--checkpoint-dir={ckpt}".encode()  # as the template passes it
        if argv[1:4] == [b"-m", b"slurmpre.job", b"run"] and wanted in argv:
            found.append(int(proc.name))
    return found


def catches_usr2(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next(ln.split()[1] for ln in status.splitlines() if ln.startswith("SigCgt:"))
    return bool(int(caught, 16) & SIGUSR2_BIT)


def where(slurm: CommandLineSlurm, job_id: str) -> str:
    """What Slurm says of the job, for a wait that fails."""
    info = slurm.job(job_id)
    return f"job {job_id} {info.state} ({info.reason}) on {info.nodes}; queue {slurm.jobs()}"


def cancel_unfinished(slurm: CommandLineSlurm, job_id: str) -> None:
    if not slurm.job(job_id).finished:
        slurm.cancel(job_id)


def warn(job_id: str) -> None:
    """What Slurm's --signal=USR2@T does at T: signal every step, not the batch shell."""
    subprocess.run(["scancel", "--signal=USR2", job_id], check=True, timeout=30)


def assert_taken_without_loss(folder: Path, baseline: Any) -> None:
    records = ledger(folder)
    assert {r["kind"] for r in records if r["event"] == "notice"} == {"time-limit"}
    # The training took the notice (it wrote where it stopped); nothing died of SIGUSR2:
    # not the wrapper (exit 140), not torchrun, not a worker.
    (seen,) = notices(folder)
    assert all(r["exit_code"] != 128 + 12 for r in records if r["event"] == "end")
    text = logs(folder)
    assert "User defined signal 2" not in text and "Received 12 death signal" not in text
    runs = progress(folder)
    assert [r["attempt"] for r in runs] == [0, 1]
    assert runs[1]["resumed_step"] == seen["step"]
    assert same_weights(final_weights(folder), baseline)


@CGROUP
def test_warning_while_node_0_chooses_the_checkpoint(
    tracking: str, sandbox: Sandbox, baseline: Any, tmp_path: Path
) -> None:
    """Node 0 is held inside its choice (the ledger lock is taken), node 1 waits for that
    choice, no training process exists yet: the warning comes then."""
    slurm = CommandLineSlurm()
    wait_preemptible_idle(slurm)
    ckpt = tmp_path / "ckpt"
    # Submitted held (submit itself writes the ledger), released once the lock is ours.
    job_id = submit(tmp_path, nodes="2", extra=HONOR, spec_lines=['extra_sbatch = ["--hold"]'])
    try:
        with FileLock(str(ckpt / ".slurmpre" / "ledger.lock")):
            subprocess.run(["scontrol", "release", job_id], check=True, timeout=30)
            wait_for(
                "both wrappers to catch SIGUSR2",
                lambda: len(pids := wrappers(ckpt)) == 2 and all(map(catches_usr2, pids)),
                timeout=120,
                why=lambda: f"{where(slurm, job_id)}; wrappers {wrappers(ckpt)}",
            )
            warn(job_id)
            # The watcher (already running on node 0) takes the warning as a notice.
            wait_for("the notice", (ckpt / ".slurmpre" / f"notice-{job_id}-0.json").exists)
            assert len(wrappers(ckpt)) == 2  # both wrappers survived it
        wait_done(slurm, job_id, tmp_path, timeout=300)
    finally:
        cancel_unfinished(slurm, job_id)  # a failure here must not hold the next test's nodes
    assert_taken_without_loss(tmp_path, baseline)
    assert notices(tmp_path)[0]["step"] == 0  # taken at the first step


@BOTH
def test_warning_during_training(
    tracking: str, sandbox: Sandbox, baseline: Any, tmp_path: Path
) -> None:
    slurm = CommandLineSlurm()
    wait_preemptible_idle(slurm)
    job_id = submit(tmp_path, nodes="2", extra=[*HONOR, "--hold-at", "7"])
    try:
        wait_for(
            "step 7",
            (tmp_path / "ckpt" / "holding").exists,
            timeout=120,
            why=lambda: where(slurm, job_id),
        )
        warn(job_id)
        wait_done(slurm, job_id, tmp_path, timeout=300)
    finally:
        cancel_unfinished(slurm, job_id)
    assert_taken_without_loss(tmp_path, baseline)
    assert notices(tmp_path)[0]["step"] >= 7  # ranks agree on it within about a second
