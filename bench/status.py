"""`slurmpre status` with 1,000 jobs in the queue (target: under 1 s), beside `squeue`.

Fills the sandbox's queue with N held jobs (they never run), of which the newest
50 are the user's slurmpre jobs (in the job index, each with a ledger of a job
preempted twice), then times, in the same run, best and median of R runs each:
  - `slurmpre status` (the user's jobs, one line each),
  - `slurmpre status JOB` (one job's attempts, from Slurm and its ledger),
  - `squeue` alone (the reference: what a user types today),
each as a whole command, Python's start-up included. Prints ratios against squeue.

Usage, as root (brings the sandbox up when it is down; any timings: nothing is requeued):
    python bench/status.py [N] [R]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from slurmpre.folder import records
from slurmpre.lines import sent_to
from slurmpre.login import jobs
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.slurm.parse import format_version

TARGET_S = 1.0


def ledger(job: str, folder: Path, t0: float) -> str:
    """A job preempted twice, as slurmpre's ledger records it (3 attempts)."""
    recs: list[records.Record] = [records.Submitted(job=job, name="bench", time=t0)]
    resume: str | None = None
    for attempt, node in enumerate(["gpu-preemptible-dp-1", "gpu-preemptible-dp-2", None]):
        t = t0 + 100 * attempt
        step = None if resume is None else 40 * attempt
        ids = {"job": job, "attempt": attempt}
        recs.append(
            records.Start(
                **ids, nodes=(node or "gpu-preemptible-dp-1",), num_nodes=1, resume_from=resume,
                step=step, time=t, world_size=1,
            )
        )  # fmt: skip
        if node is None:
            recs.append(records.End(**ids, exit_code=0, seconds=60, time=t + 60))
            break
        resume = str(folder / f"step-{40 * (attempt + 1):08d}")
        recs += [
            records.Notice(**ids, kind="drain", node=node, reason="preempted", drained_at=t + 50,
                           seen_at=t + 51, deadline_at=t + 350, deadline_from="slurm", first=True,
                           time=t + 51),
            records.Checkpoint(**ids, after_notice=True, path=resume, step=40 * (attempt + 1),
                               seconds=1.0, time=t + 52),
            records.Committed(**ids, path=resume, step=40 * (attempt + 1), committed_seen_at=t + 52,
                              time=t + 52),
            records.Requeued(**ids, requeued_at=t + 53, time=t + 53,
                             why="after the just-in-time checkpoint"),
            records.End(**ids, exit_code=1, seconds=54, time=t + 54),
        ]  # fmt: skip
    return "".join(json.dumps(r.to_json(), sort_keys=True) + "\n" for r in recs)


def timed(argv: list[str], repeat: int, env: dict[str, str]) -> tuple[float, float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=True, env=env)
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)


def main() -> int:
    # --quick: 20 held jobs, 2 runs each, the target not enforced (CI's smoke test).
    quick = "--quick" in sys.argv[1:]
    given = [a for a in sys.argv[1:] if a != "--quick"]
    n = int(given[0]) if given else 20 if quick else 1000
    repeat = int(given[1]) if len(given) > 1 else 2 if quick else 7
    box = Sandbox.here()
    state = box.load()
    if state is None:  # any running shape will do: nothing is requeued
        with sent_to(print, "slurmpre.sandbox"):
            state = box.up()
    box.use()  # its Slurm commands first on PATH (26.05's are not the host's)
    work = Path(tempfile.mkdtemp(prefix="bench-status-"))
    env = {**os.environ, "XDG_STATE_HOME": str(work / "state")}
    index = work / "state" / "slurmpre" / "jobs.jsonl"
    ids: list[str] = []
    try:
        for i in range(n):
            out = subprocess.run(
                ["sbatch", "--parsable", "--hold", f"--job-name=bench-{i}", "--wrap=true",
                 "--constraint=preemptible", f"--output={work}/%j.out"],
                capture_output=True, text=True, check=True,
            ).stdout  # fmt: skip
            ids.append(out.split(";")[0].strip())
        for job in ids[-50:]:
            folder = work / f"ckpt-{job}"
            (folder / ".slurmpre").mkdir(parents=True)
            (folder / ".slurmpre" / "attempts.jsonl").write_text(ledger(job, folder, time.time()))
            entry = jobs.Submitted(job, f"bench-{job}", str(folder), str(folder), time.time())
            jobs.remember(entry, index)
        queued = subprocess.run(["squeue", "-h"], capture_output=True, text=True, check=True)
        print(
            f"queue: {len(queued.stdout.splitlines())} jobs ({n} held), {min(n, 50)} of them in the job "
            f"index with a ledger; sandbox: Slurm {format_version(state.version)}, "
            f"{state.timings} timings (not used: nothing runs)"
        )
        cli = [sys.executable, "-m", "slurmpre"]
        rows = [
            ("squeue", ["squeue"]),
            ("slurmpre status", [*cli, "status"]),
            (f"slurmpre status {ids[-1]}", [*cli, "status", ids[-1]]),
        ]
        base = None
        worst = 0.0
        for what, argv in rows:
            best, median = timed(argv, repeat, env)
            base = base or median
            if what != "squeue":
                worst = max(worst, median)
            print(
                f"{what:28s} best {best * 1000:7.1f} ms  median {median * 1000:7.1f} ms  "
                f"ratio to squeue {median / base:5.2f}"
            )
    finally:
        for start in range(0, len(ids), 200):
            subprocess.run(["scancel", *ids[start : start + 200]], check=False)
    verdict = "meets" if worst < TARGET_S else "MISSES"
    print(f"{verdict} the {TARGET_S:g} s target (slowest status median {worst:.2f} s)")
    return 0 if worst < TARGET_S or quick else 1


if __name__ == "__main__":
    raise SystemExit(main())
