"""Sweeps at scale (#26): what N jobs of one user cost slurmctld, and how fast each hears
of a wave of drains, with every job polling for itself against the shared drain board.

For each N (default 1, 10, 30) and each way (``per-job``: SLURMPRE_SHARED_WATCH=0;
``shared``: the board, slurmpre's default; ``grow``: the board, each job with a node range
``"1-2"`` that watches for idle nodes to grow onto, which makes the board's poll ask
about every node), in one run:

1. N one-node jobs of one user (one core each; a plain-Python script that asks
   ``slurmpre.preemption_requested()`` twice a second, saves with
   ``slurmpre.checkpoint`` on the notice and ends) are started and left to settle;
2. slurmctld's RPC count *from that user* (``sdiag``'s per-user table) is read before
   and after ``--seconds`` of idling: RPCs per second (the bench itself makes only the
   two sdiag calls in the window; in the sandbox the jobs and slurmd both run as root,
   and what the idle cluster sends from the same user, slurmd's registrations, is
   measured first and taken off);
3. a wave: ``--wave`` nodes running jobs are drained at once; each affected job's
   notice latency is its ledger's notice ``seen_at`` less the moment the drain was
   issued, median and p99; each must have committed its notice checkpoint (0 steps
   lost: the script saves the step it is on);
4. every job is cancelled and the nodes resumed.

Slurm exempts root and SlurmUser from rate limiting: ``--as-user NAME`` runs the jobs
as an ordinary user (made if missing, on the host and in a Debian root's passwd),
submitted by root with ``sbatch --uid``. Rate limiting needs Slurm 23.02+: ``--slurm 26.05 --rate-limit on`` brings the sandbox
up from sid's root with ``SlurmctldParameters=rl_enable`` (Slurm's defaults: 30
tokens, 2 a second per user); 22.05 (the host's) has none. The sandbox gets
``--nodes`` nodes (all but one preemptible), two jobs to a node (each node declares
the host's 2 cores). Timings are the sandbox's tuned ones (they do not change a
poll's cost); ``poll_interval`` is 5 s, the default.

Usage: python bench/sweep_load.py [--jobs 1,10,30] [--ways per-job,shared,grow] [--seconds 60] [--wave 5]
                                  [--as-user NAME] [--start-timeout 300]
                                  [--slurm RELEASE] [--rate-limit on|B/R] [--nodes 16]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from slurmpre.drill.driver import read_jsonl
from slurmpre.folder.layout import FolderLayout
from slurmpre.lines import sent_to
from slurmpre.login.render import render
from slurmpre.login.spec import validate
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.sandbox.seen import job_python

SCRIPT = """
import json, time, slurmpre
step = 0
while not slurmpre.preemption_requested():
    time.sleep(0.5)
    step += 1
with slurmpre.checkpoint(step) as path:
    (path / "state.json").write_text(json.dumps({"step": step}))
"""

_USER_LINE = re.compile(r"^\s+(\S+)\s+\(\s*(\d+)\)\s+count:(\d+)", re.M)


ENV: dict[str, str] | None = None  # the sandbox's: its Slurm commands first on PATH
USER: str | None = None  # --as-user: the jobs run as this ordinary user


def rpcs_by_user() -> dict[str, int]:
    """sdiag's "Remote Procedure Call statistics by user": user -> RPC count."""
    for _ in range(10):
        proc = subprocess.run(["sdiag"], capture_output=True, text=True, check=False, env=ENV)
        if proc.returncode == 0:
            break
        time.sleep(1)
    else:
        raise SystemExit(f"bench: sdiag failed: {proc.stderr.strip()}")
    out = proc.stdout
    part = out.split("Remote Procedure Call statistics by user", 1)[-1]
    part = part.split("Pending RPC statistics", 1)[0]
    return {m.group(1): int(m.group(3)) for m in _USER_LINE.finditer(part)}


def ensure_user(box: Sandbox, name: str) -> None:
    """An ordinary user to run the jobs as (root is exempt from rl_enable), on the host
    and, for a release run from a Debian root, in the root's passwd and group too."""
    if subprocess.run(["id", name], capture_output=True, check=False).returncode != 0:
        subprocess.run(["useradd", "-M", "-s", "/bin/sh", name], check=True)
    home = Path("/home") / name
    home.mkdir(exist_ok=True)
    shutil.chown(home, name, name)
    if box.root is None:
        return
    for db in ("passwd", "group"):
        line = subprocess.run(["getent", db, name], capture_output=True, text=True,
                              check=True).stdout  # fmt: skip
        path = box.root.path / "etc" / db
        if not any(ln.split(":")[0] == name for ln in path.read_text().splitlines()):
            with path.open("a") as fh:
                fh.write(line)


def submit(box: Sandbox, work: Path, python: str, i: int, way: str) -> str:
    folder = work / f"job-{i}"
    shared = way != "per-job"
    # A job that may grow (a node range, a successor) watches every node for idle ones; it
    # is started on one node (sbatch's --nodes=1 over the script's 1-2: Slurm would give
    # each the most it can), so that every one watches (the row says how many did). It
    # cannot requeue here, so the grow it tries is refused and it goes on watching.
    grows = {"nodes": "1-2", "restart": "successor"} if way == "grow" else {}
    one = ["--nodes=1"] if way == "grow" else []
    spec = validate(
        {
            "name": f"load-{i}",
            "command": [python, "-c", SCRIPT],
            "launcher": "plain",
            "python": python,
            "cpus_per_task": 1,
            **grows,
            "checkpoint_dir": str(folder),
            "requeue": False,  # the notice and its checkpoint are what is measured
            "env": {
                "SLURMPRE_SHARED_WATCH": "1" if shared else "0",
                "SLURMPRE_SHARED_DIR": str(work / "board"),
            },
        }
    )
    (folder / "logs").mkdir(parents=True)
    if USER is None:
        return box.client.submit(render(spec), args=one)
    for path in (work, folder, folder / "logs"):
        shutil.chown(path, USER, USER)
    return box.client.submit(render(spec), args=[f"--uid={USER}", f"--gid={USER}", *one])


def ledger(folder: Path) -> list[dict[str, Any]]:
    """The folder's ledger records as written so far (a line being written is skipped)."""
    return read_jsonl(FolderLayout(folder).ledger)


def run_one(
    box: Sandbox, python: str, n: int, way: str, args: argparse.Namespace
) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"slurmpre-load-{n}-", dir=args.workdir))
    submitted = time.time()
    ids = [submit(box, work, python, i, way) for i in range(n)]
    deadline = submitted + args.start_timeout
    # every wrapper up and listening (its start record written): how long that takes
    # for all N is a result too, since start-up queries spend the same per-user bucket
    while True:
        started = sum(
            any(r.get("event") == "start" for r in ledger(work / f"job-{i}")) for i in range(n)
        )
        if started == n or time.time() > deadline:
            break
        time.sleep(1)
    start_s = time.time() - submitted
    if started < n:  # reported as it is: a row without the wave
        states = [box.client.job(j).state for j in ids]
        for j in ids:
            box.client.cancel(j)
        while any(not box.client.job(j).finished for j in ids):
            time.sleep(1)
        return {"jobs": n, "way": way, "started": started, "start_s": start_s,
                "states": {s: states.count(s) for s in set(states)}}  # fmt: skip
    time.sleep(args.settle)
    before = rpcs_by_user()
    time.sleep(args.seconds)
    after = rpcs_by_user()
    rate = (after.get(args.user, 0) - before.get(args.user, 0) - 1) / args.seconds  # less sdiag

    # the wave: the first --wave nodes running any of these jobs, drained at once
    infos = {j: box.client.job(j) for j in ids}
    nodes = sorted({info.nodes[0] for info in infos.values()})[: args.wave]
    hit = [i for i, j in enumerate(ids) if infos[j].nodes[0] in nodes]
    t0 = time.time()
    for node in nodes:
        box.client.update_node(node, state="DRAIN", reason="preempted")
    latencies: list[float] = []
    saved = 0
    deadline = time.time() + 120
    pending = set(hit)
    while pending and time.time() < deadline:
        for i in sorted(pending):
            recs = ledger(work / f"job-{i}")
            notice = next((r for r in recs if r.get("event") == "notice"), None)
            if notice is not None and any(r.get("event") == "checkpoint" for r in recs):
                latencies.append(notice["seen_at"] - t0)
                saved += 1
                pending.discard(i)
        time.sleep(0.5)
    for j in ids:
        box.client.cancel(j)
    for node in nodes:
        box.client.update_node(node, state="RESUME")
    while any(not box.client.job(j).finished for j in ids):
        time.sleep(1)
    throttled = 0
    for i in range(n):
        for log in (work / f"job-{i}" / "logs").glob("*.attempt-*.out"):
            for m in re.finditer(r"(\d+) times told to back off", log.read_text(errors="replace")):
                throttled += int(m.group(1))
    latencies.sort()
    return {
        "throttled": throttled,
        "watching": sum(len(info.nodes) < 2 for info in infos.values()) if way == "grow" else 0,
        "jobs": n,
        "way": way,
        "started": started,
        "start_s": start_s,
        "rpc_per_s": rate,
        "affected": len(hit),
        "noticed_and_saved": saved,
        "median_s": statistics.median(latencies) if latencies else None,
        "p99_s": latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
        if latencies
        else None,
        "max_s": latencies[-1] if latencies else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", default="1,10,30")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--settle", type=float, default=10.0)
    parser.add_argument(
        "--start-timeout", type=float, default=300.0,
        help="How long N jobs may take from submission until every wrapper has started.",
    )  # fmt: skip
    parser.add_argument(
        "--ways",
        default="per-job,shared,grow",
        help="Which ways, in this order (per-job, shared, grow).",
    )
    parser.add_argument("--wave", type=int, default=5)
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--slurm", default=None)
    parser.add_argument("--rate-limit", default=None)
    parser.add_argument("--user", default="root")
    parser.add_argument("--workdir", default="/home")
    parser.add_argument(
        "--as-user", default=None, help="Run the jobs as this ordinary user (made if missing)."
    )
    parser.add_argument("--quick", action="store_true", help="CI's smoke test: 2 jobs, 4 nodes")
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.seconds, args.settle, args.nodes, args.wave = "2", 10.0, 2.0, 4, 1
    counts = [int(x) for x in args.jobs.split(",")]
    box = Sandbox.here()
    box.down()
    time.sleep(5)  # the last slurmd let go of its port
    with sent_to(print, "slurmpre.sandbox"):
        box.up(args.nodes, args.nodes - 1, slurm=args.slurm, rate_limit=args.rate_limit,
               timeout=180)  # fmt: skip
    global ENV, USER
    ENV = box.env
    if args.as_user:
        ensure_user(box, args.as_user)
        USER = args.user = args.as_user
        args.workdir = f"/home/{args.as_user}"
    python = job_python(box.root, box.state_dir)
    version = ".".join(map(str, box.load().version))  # type: ignore[union-attr]
    limit = f"rate limit {args.rate_limit}" if args.rate_limit else "no rate limit"
    print(f"Slurm {version}, tuned timings, {args.nodes} nodes, {limit}, poll_interval 5 s")
    # slurmd runs as root too: what the idle cluster sends in the window, taken off below
    before = rpcs_by_user()
    time.sleep(args.seconds)
    idle = (rpcs_by_user().get(args.user, 0) - before.get(args.user, 0) - 1) / args.seconds
    print(f"  0 jobs: {idle:6.2f} RPC/s from {args.user} (the nodes' slurmd), taken off below")
    rows = []
    ways = [w.strip() for w in args.ways.split(",")]
    if not ways or not set(ways) <= {"per-job", "shared", "grow"}:
        raise SystemExit(f"bench: --ways {args.ways}: give per-job, shared, grow or some")
    for n in counts:
        for way in ways:
            row = run_one(box, python, n, way, args)
            rows.append(row)
            if row["started"] < n:
                print(
                    f"{n:>3} jobs {way:>7}: only {row['started']} of {n} wrappers had started "
                    f"{row['start_s']:.0f} s after submission (Slurm states {row['states']}); "
                    "no rate or wave measured",
                    flush=True,
                )
                continue
            row["rpc_per_s"] -= idle
            print(
                f"{n:>3} jobs {way:>7}: all started {row['start_s']:.0f} s after submission; "
                f"{row['rpc_per_s']:6.2f} RPC/s from the user; "
                f"wave of {row['affected']} jobs: {row['noticed_and_saved']} saved on the notice, "
                f"notice median {row['median_s']:.2f} s, p99 {row['p99_s']:.2f} s, "
                f"max {row['max_s']:.2f} s; {row['throttled']} queries throttled"
                + (f"; {row['watching']} watching to grow" if way == "grow" else ""),
                flush=True,
            )
    base = {r["jobs"]: r["rpc_per_s"] for r in rows if r["way"] == "per-job" and "rpc_per_s" in r}
    for r in rows:
        if r["way"] != "per-job" and "rpc_per_s" in r and base.get(r["jobs"]):
            print(
                f"{r['jobs']:>3} jobs: {r['way']} costs {r['rpc_per_s'] / base[r['jobs']]:.2f}x "
                "of per-job"
            )
    print(json.dumps(rows))
    box.down()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
