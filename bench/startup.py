"""`slurmpre.job run` start-up: from the wrapper's exec to its child's exec (target <= 150 ms).

Both the wrapper and the reference are timed from the moment they are
spawned until their child (``date``) prints the time:
- reference: a bare ``python -c`` that spawns the same child;
- slurmpre: ``python -m slurmpre.job run --launcher plain`` as node 0 of a
  one-node job (reads the Slurm environment, resolves the newest complete
  checkpoint among 100, appends to the ledger under its lock, publishes the
  choice), then spawns the child.
The difference is slurmpre's own overhead. Usage: python bench/startup.py
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from slurmpre.job.checkpoints import writing

TARGET_MS = 150.0
RUNS = 15
CHILD = ["date", "+%s.%N"]


def spawn_to_child(argv: list[str], env: dict[str, str]) -> float:
    start = time.time()
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
    return (float(out.strip().splitlines()[-1]) - start) * 1000


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for step in range(100):
            with writing(folder, step) as p:
                (p / "w").write_bytes(b"x")
        env = {
            **os.environ,
            "SLURM_JOB_ID": "990001",
            "SLURM_JOB_NODELIST": "bench-node",
            "SLURMD_NODENAME": "bench-node",
            "SLURM_NODEID": "0",
        }
        ref_argv = [sys.executable, "-c", f"import subprocess; subprocess.run({CHILD!r})"]
        wrap_argv = [
            sys.executable,
            "-m",
            "slurmpre.job",
            "run",
            "--launcher",
            "plain",
            "--checkpoint-dir",
            str(folder),
            "--",
            *CHILD,
        ]
        ref, wrap = [], []
        for attempt in range(RUNS):
            env["SLURM_RESTART_COUNT"] = str(attempt)
            ref.append(spawn_to_child(ref_argv, env))
            wrap.append(spawn_to_child(wrap_argv, env))
    r, w = statistics.median(ref), statistics.median(wrap)
    print(f"runs: {RUNS} each, interleaved; checkpoints in the folder: 100")
    print(f"reference python -c spawn:   median {r:7.1f} ms  best {min(ref):7.1f} ms")
    print(f"slurmpre.job run (plain):    median {w:7.1f} ms  best {min(wrap):7.1f} ms")
    print(f"ratio slurmpre / reference:  {w / r:.2f}")
    print(
        f"slurmpre's own overhead:     {w - r:.1f} ms (target <= {TARGET_MS:g} ms for the whole start-up)"
    )
    verdict = "meets" if w <= TARGET_MS else "MISSES"
    print(f"{verdict} the {TARGET_MS:g} ms target (median start-up to the launcher's exec)")
    return 0 if w <= TARGET_MS else 1


if __name__ == "__main__":
    raise SystemExit(main())
