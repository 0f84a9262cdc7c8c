"""End to end (#24 items 1 and 2): the Python API submits, finds, waits for and cancels
jobs on the sandbox, and `slurmpre wait` exits with each job's outcome."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import slurmpre
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.slurm.client import CommandLineSlurm

from tests.conftest import slurmpre_cli, wait_for, wait_preemptible_idle

pytestmark = [pytest.mark.sandbox, pytest.mark.e2e]


def spec(folder: Path, name: str, code: str) -> Path:
    path = folder / f"{name}.toml"
    path.write_text(
        "\n".join(
            [
                f'name = "{name}"',
                f"command = {json.dumps([sys.executable, '-c', code])}",
                'launcher = "plain"',
                f"checkpoint_dir = {json.dumps(str(folder / name))}",
                "poll_interval = 1",
            ]
        )
        + "\n"
    )
    return path


def test_submit_wait_and_cancel_from_python_and_wait_from_the_shell(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    slurm = CommandLineSlurm()
    wait_preemptible_idle(slurm)
    said: list[str] = []
    ok = slurmpre.submit(spec(tmp_path, "ok", "print('hello from the job')"), say=said.append)
    failing = slurmpre.submit(
        spec(tmp_path, "bad", "import sys; sys.exit(3)"), constraint="standard"
    )
    long = slurmpre.submit(
        spec(tmp_path, "long", "import time; time.sleep(600)"), env={"WHO": "python"}
    )
    try:
        assert said == ["starts at step 0: no complete checkpoint in the folder"]
        assert slurmpre.Job.find("ok").id == ok.id  # found again by its name
        assert ok.wait(timeout=240) == "COMPLETED"
        assert "hello from the job" in ok.logs()
        assert [a.ended for a in ok.status().attempts] == ["completed"]
        with pytest.raises(slurmpre.JobFailed) as err:
            failing.wait(timeout=240)
        assert err.value.state == "FAILED"
        assert str(err.value) == f"job {failing.id} ended FAILED (failed (exit 3))"
        shell_ok = slurmpre_cli("wait", ok.id, check=True)
        assert shell_ok.stdout.strip() == f"job {ok.id} completed"
        shell_bad = slurmpre_cli("wait", "bad")
        assert shell_bad.returncode == 1
        assert shell_bad.stderr.strip() == f"slurmpre: error: {err.value}"
        # logs --follow ends as wait does: the log, then the run's outcome as exit code
        followed_ok = slurmpre_cli("logs", ok.id, "-f")
        assert followed_ok.returncode == 0 and "hello from the job" in followed_ok.stdout
        followed_bad = slurmpre_cli("logs", "bad", "-f")
        assert followed_bad.returncode == 1
        assert followed_bad.stderr.strip() == f"slurmpre: error: {err.value}"
        wait_for("the long job to run", lambda: long.state() == "RUNNING", timeout=120)
        timed_out = slurmpre_cli("wait", long.id, "--timeout", "1")
        assert timed_out.returncode == 1
        assert f"job {long.id} is still RUNNING after 1 s of waiting" in timed_out.stderr
        assert long.cancel().startswith(f"cancelled job {long.id}")
        with pytest.raises(slurmpre.JobFailed, match=rf"job {long.id} ended CANCELLED"):
            long.wait(timeout=120)
    finally:
        for job in (ok, failing, long):
            slurm.cancel(job.id)
