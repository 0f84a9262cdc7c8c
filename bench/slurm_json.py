"""Text or --json: what the Slurm client should ask the running sandbox's Slurm for.

The watcher asks for the job's nodes every poll, on every job: the cost of one
query (command + parse) and what the answer looks like decide the backend. For
`scontrol show node -o NODES` and `scontrol show job -o ID`, against the same
query with `--json` (24.05 and later), this measures in one run: wall time per
call (command and parse, best and median of N), the bytes each answer carries,
and whether the JSON's schema is the one the previous release printed.

Usage, as root, with the sandbox of the release to measure up (`slurmpre sandbox up
[--slurm RELEASE]`; with none up, it brings up the default one):
    python bench/slurm_json.py [N]
Prints ratios json / text. Sandbox timings do not matter here (no requeue).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

from slurmpre.lines import sent_to
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.slurm.parse import format_version, parse_jobs, parse_nodes, parse_version

NODES = "gpu-preemptible-dp-1,gpu-preemptible-dp-2"


def timed(argv: list[str], parse: object, n: int) -> tuple[float, float, int]:
    times, size = [], 0
    for _ in range(n):
        start = time.perf_counter()
        out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        parse(out)  # type: ignore[operator]
        times.append((time.perf_counter() - start) * 1000)
        size = len(out.encode())
    return min(times), statistics.median(times), size


def main() -> int:
    # --quick: 3 queries of each (CI's smoke test).
    quick = "--quick" in sys.argv[1:]
    given = [a for a in sys.argv[1:] if a != "--quick"]
    n = int(given[0]) if given else 3 if quick else 40
    box = Sandbox.here()
    if box.load() is None:  # any running shape will do
        with sent_to(print, "slurmpre.sandbox"):
            box.up()
    box.use()  # its Slurm commands first on PATH (26.05's are not the host's)
    version = parse_version(
        subprocess.run(["sinfo", "--version"], capture_output=True, text=True).stdout
    )
    print(f"Slurm {format_version(version)} ({'a Debian root' if box.root else 'the host'}), N={n}")
    job = (
        subprocess.run(
            ["sbatch", "--parsable", "--nodes=2", "--constraint=preemptible", "--wrap=sleep 300"],
            capture_output=True,
            text=True,
            check=True,
        )
        .stdout.split(";")[0]
        .strip()
    )
    try:
        time.sleep(2)
        rows = [
            ("show node (2 nodes)", ["scontrol", "--local", "show", "node", "-o", NODES], parse_nodes,
             ["scontrol", "--local", "--json", "show", "node", NODES]),
            ("show job", ["scontrol", "show", "job", "-o", job], parse_jobs,
             ["scontrol", "--json", "show", "job", job]),
        ]  # fmt: skip
        for what, text_argv, parse, json_argv in rows:
            t = timed(text_argv, parse, n)
            line = f"{what:20s} text: best {t[0]:6.1f} ms median {t[1]:6.1f} ms {t[2]:6d} B"
            if version < (24, 5, 0):
                print(line + "   --json: not offered by this release")
                continue
            j = timed(json_argv, json.loads, n)
            print(
                line + f"   --json: best {j[0]:6.1f} ms median {j[1]:6.1f} ms {j[2]:6d} B"
                f"   ratio json/text: time {j[1] / t[1]:.2f}, bytes {j[2] / t[2]:.1f}"
            )
        if version >= (24, 5, 0):
            meta = json.loads(
                subprocess.run(["scontrol", "--json", "show", "node", NODES], capture_output=True,
                               text=True, check=True).stdout
            )["meta"]  # fmt: skip
            print(f"JSON schema: {meta['plugin']['data_parser']} (changes with each release)")
    finally:
        subprocess.run(["scancel", job], check=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
