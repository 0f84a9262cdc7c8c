"""The node-local tier under the real wrapper on a sandbox node: checkpoints written on
the node reach the checkpoint folder whole before the job ends, and the node's copies go;
a local_dir the node cannot use is one line, and the checkpoint folder as without it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from slurmpre.folder import checkpoints
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import Checkpoint, Saved
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.slurm.client import CommandLineSlurm

from tests.conftest import wait_preemptible_idle

pytestmark = pytest.mark.sandbox

WRAPPER = [sys.executable, "-m", "slurmpre.job", "run", "--launcher", "plain"]
SCRIPT = (
    "import os, pathlib, slurmpre\n"
    "out = pathlib.Path(os.environ['SLURMPRE_CHECKPOINT_DIR']) / 'local-was'\n"
    "out.write_text(os.environ.get('SLURMPRE_LOCAL_DIR', ''))\n"
    "for step in (1, 2, 3):\n"
    "    with slurmpre.checkpoint(step) as d:\n"
    "        (d / 'weights.bin').write_bytes(bytes([step]) * 1_000_000)\n"
)


def _run(ckpt: Path, local_dir: str) -> subprocess.CompletedProcess[str]:
    wait_preemptible_idle(CommandLineSlurm())
    return subprocess.run(
        [
            "srun", "--nodes=1", "--ntasks-per-node=1", "--constraint=preemptible",
            *WRAPPER, "--checkpoint-dir", str(ckpt), f"--local-dir={local_dir}",
            "--", sys.executable, "-c", SCRIPT,
        ],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip


def test_saves_on_the_node_reach_the_folder_before_the_job_ends(
    sandbox: Sandbox, shared_tmp: Path
) -> None:
    ckpt = shared_tmp / "local-tier"
    ckpt.mkdir()
    proc = _run(ckpt, "auto")
    assert proc.returncode == 0, proc.stderr
    was = Path((ckpt / "local-was").read_text())
    assert was.name and not ckpt.is_relative_to(was)
    found = checkpoints.latest(ckpt).checkpoint
    assert found is not None and found.step == 3
    assert (found.path / "weights.bin").read_bytes() == bytes([3]) * 1_000_000
    records = Ledger(ckpt).records()
    assert [r.step for r in records if isinstance(r, Saved)] == [1, 2, 3]
    flushed = [r for r in records if isinstance(r, Checkpoint)]
    assert flushed[-1].step == 3 and flushed[-1].flush_seconds is not None
    assert "flush: step 3 committed in the shared folder" in proc.stderr
    assert not was.exists()  # the run ended: its local copies went


def test_a_local_dir_the_node_cannot_use_is_one_line(sandbox: Sandbox, shared_tmp: Path) -> None:
    ckpt = shared_tmp / "no-local"
    ckpt.mkdir()
    proc = _run(ckpt, "/no/such/folder")
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stderr.splitlines() if "local_dir" in line]
    assert len(said) == 1 and said[0].endswith(
        "local_dir '/no/such/folder' cannot be used: No such file or directory: "
        "checkpoints go straight to the checkpoint folder"
    )
    assert (ckpt / "local-was").read_text() == ""
    assert checkpoints.latest(ckpt).checkpoint.step == 3  # type: ignore[union-attr]
    assert not [r for r in Ledger(ckpt).records() if isinstance(r, Saved)]
    assert (ckpt / "step-00000003").is_dir()
