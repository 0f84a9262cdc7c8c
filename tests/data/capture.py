"""Capture the Slurm output the parser tests read, from the sandbox that is up.

Usage (as root, with `slurmpre sandbox up [--slurm RELEASE]` done):
    .venv/bin/python tests/data/capture.py
writes tests/data/slurm-<major.minor>/: the same scenes on every release (a job on
an elastic range, a node drained under it, a requeue, a cancel, a node set down),
so that each parser test runs unchanged on each. Where the release answers
``--json`` (24.05 and later), the JSON of the same scenes is kept beside the text.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from slurmpre.sandbox.cluster import Sandbox
from slurmpre.slurm.parse import parse_jobs, parse_version

HERE = Path(__file__).parent


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    if check and proc.returncode != 0:
        raise SystemExit(f"capture: {' '.join(argv)} failed: {proc.stderr.strip()}")
    return proc


def wait(what: str, probe: object, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe():  # type: ignore[operator]
            return
        time.sleep(0.3)
    raise SystemExit(f"capture: timed out waiting for {what}")


def job_state(job_id: str) -> str:
    jobs = parse_jobs(sh("scontrol", "show", "job", "-o", job_id).stdout)
    return jobs[0].state if jobs else ""


def main() -> int:
    box = Sandbox.here()
    box.current()
    box.use()  # the root's Slurm commands first on PATH
    version = parse_version(sh("sinfo", "--version").stdout)
    out = HERE / f"slurm-{version[0]}.{version[1]:02d}"
    out.mkdir(exist_ok=True)
    json_ok = version >= (24, 5, 0)

    def keep(name: str, text: str) -> None:
        (out / name).write_text(text)
        print(f"  {out.name}/{name}")

    keep("sinfo-version.txt", sh("sinfo", "--version").stdout)
    slurmd = ["slurmd", "-V"] if box.root is None else box.root.argv(["slurmd", "-V"])
    keep("slurmd-version.txt", sh(*slurmd).stdout)
    work = Path(tempfile.mkdtemp(prefix="sx-", dir="/tmp"))
    script = work / "hostile.sh"
    script.write_text("#!/bin/sh\nsleep 600\n")
    os.chdir(work)
    for node in ("gpu-preemptible-dp-1", "gpu-preemptible-dp-2"):
        sh("scontrol", "update", f"nodename={node}", "state=resume", check=False)

    # A job on an elastic range, both nodes.
    job = sh(
        "sbatch", "--parsable", "--job-name=name with space", "--nodes=1-2",
        "--ntasks-per-node=1", "--requeue", "--constraint=preemptible",
        f"--output={work / 'out 2.txt'}", str(script),
    ).stdout.strip().split(";")[0]  # fmt: skip
    wait("the job running", lambda: job_state(job) == "RUNNING")
    keep("job-running-elastic.txt", sh("scontrol", "show", "job", "-o", job).stdout)
    if json_ok:
        keep("squeue-running.json", sh("squeue", "--json").stdout)
        keep("job-running-elastic.json", sh("scontrol", "--json", "show", "job", job).stdout)

    # The provider's preemption: a drain, no signal.
    sh("scontrol", "update", "nodename=gpu-preemptible-dp-1", "state=drain",
       "reason=preempted [by test]")  # fmt: skip
    keep("nodes-one-draining.txt", sh("scontrol", "--local", "show", "node", "-o").stdout)
    keep("sinfo-one-draining.txt", sh("sinfo", "-h", "-N", "-o", "%N|%T|%f|%E").stdout)
    if json_ok:
        keep("nodes-one-draining.json", sh("scontrol", "--json", "show", "node").stdout)
    test_only = sh("sbatch", "--test-only", "--constraint=preemptible", str(script), check=False)
    keep("sbatch-test-only.txt", test_only.stderr)

    # The job requeues itself, and is cancelled.
    sh("scontrol", "requeue", job)
    keep("job-pending-requeued.txt", sh("scontrol", "show", "job", "-o", job).stdout)
    sh("scancel", job)
    wait("the job cancelled", lambda: job_state(job) == "CANCELLED")
    keep("job-cancelled.txt", sh("scontrol", "show", "job", "-o", job).stdout)
    keep("job-unknown.txt", sh("scontrol", "show", "job", "-o", "999999", check=False).stderr)

    # A node set down while drained.
    sh("scontrol", "update", "nodename=gpu-preemptible-dp-1", "state=down", "reason=gone")
    keep(
        "node-down-drain.txt",
        sh("scontrol", "--local", "show", "node", "-o", "gpu-preemptible-dp-1").stdout,
    )
    if json_ok:
        keep(
            "node-down-drain.json",
            sh("scontrol", "--json", "show", "node", "gpu-preemptible-dp-1").stdout,
        )
    sh("scontrol", "update", "nodename=gpu-preemptible-dp-1", "state=resume")

    # slurmctld's configuration (the requeue floor is its AuthInfo's cred_expire).
    keep("config.txt", sh("scontrol", "show", "config").stdout)

    # An in-place restart, as slurmpre's supervisor does it: inside a running two-node
    # job, give up the node that is not the batch host; scontrol writes the resized
    # environment (only the variables the job has) into its working directory.
    shrink = work / "shrink.sh"
    shrink.write_text(
        "#!/bin/bash\n"
        "scontrol update JobId=$SLURM_JOB_ID NodeList=$SLURMD_NODENAME\n"
        "cp slurm_job_${SLURM_JOB_ID}_resize.sh resized.sh\n"
        "sleep 600\n"
    )
    job = sh(
        "sbatch", "--parsable", "--job-name=shrink", "--nodes=2", "--requeue",
        "--constraint=preemptible", f"--chdir={work}", f"--output={work / 'shrink.txt'}",
        str(shrink),
    ).stdout.strip().split(";")[0]  # fmt: skip
    wait("the resize script", (work / "resized.sh").exists)
    keep("resize.sh", (work / "resized.sh").read_text().replace(job, "JOBID"))
    keep("job-shrunk.txt", sh("scontrol", "show", "job", "-o", job).stdout)
    sh("scancel", job)
    return 0


if __name__ == "__main__":
    sys.exit(main())
