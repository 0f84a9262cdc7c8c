"""One attempt of the wrapper, in a process of its own, against a Slurm that ends the step
on a requeue the way slurmctld does: SIGTERM to every process of the step, before
``scontrol requeue`` has returned. Run by tests/job/test_run.py.

argv: the checkpoint folder. The notice is a time-limit warning that came at start-up;
the training checkpoints on it and exits.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: find tests/

from slurmpre.job.start.args import parse_args
from slurmpre.job.start.run import run_attempt
from slurmpre.signals import Latch
from slurmpre.slurm.parse import JobInfo, NodeInfo, parse_jobs

from tests.conftest import DATA
from tests.fakes import FakeSlurm

TRAIN = """\
import os, time
from pathlib import Path
import slurmpre
Path(os.environ["SLURMPRE_CHECKPOINT_DIR"], "child.pid").write_text(str(os.getpid()))
while not slurmpre.preemption_requested():
    time.sleep(0.05)
with slurmpre.checkpoint(3) as path:
    (path / "w").write_text("3")
"""


class KillingSlurm(FakeSlurm):
    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def job(self, job_id: str) -> JobInfo:
        text = (DATA / "slurm-22.05" / "job-running-elastic.txt").read_text()
        return parse_jobs(text)[0]  # a running job with Requeue=1

    def nodes(self, names: Sequence[str] = ()) -> list[NodeInfo]:
        return [NodeInfo(n, "ALLOCATED", frozenset(), None, ("preemptible",)) for n in names]

    def config(self) -> dict[str, str]:
        return {"AuthInfo": "cred_expire=5"}

    def requeue(self, job_id: str) -> None:
        # The requeue comes once the training has exited, and the wrapper is past it.
        pid = int((self.folder / "child.pid").read_text())
        while Path(f"/proc/{pid}").exists():  # until the wrapper has reaped it
            time.sleep(0.02)
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGTERM)  # slurmd's kill reaches the step first
        time.sleep(0.5)


def main() -> int:
    folder = Path(sys.argv[1])
    opts = parse_args(
        [
            "--launcher",
            "plain",
            "--restart",
            "requeue",
            "--checkpoint-dir",
            str(folder),
            "--",
            sys.executable,
            "-c",
            TRAIN,
        ]
    )
    env = {
        **os.environ,
        "SLURM_JOB_ID": "42",
        "SLURM_JOB_NODELIST": "node-1",
        "SLURMD_NODENAME": "node-1",
        "SLURM_NODEID": "0",
        "SLURM_RESTART_COUNT": "0",
    }
    warning = Latch()
    warning(signal.SIGUSR2, None)  # the time-limit warning, latched at start-up
    return run_attempt(opts, env, warning=warning, client=KillingSlurm(folder))


if __name__ == "__main__":
    raise SystemExit(main())
