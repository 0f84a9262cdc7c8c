"""Restarting in place against requeuing: drain → training again, and where a requeue's time goes.

The drill's training job (torchrun over gloo, 2 nodes, ``nodes = "1-2"``, a
script that checkpoints on the notice) is drained on its node that is not the
batch host, once with ``in_place = true`` (the supervisor releases the node and
the next step trains on the batch host) and once with ``in_place = false``
(slurmpre requeues at once after the checkpoint). Printed for each: the
notice checkpoint's write time, drain seen → first step trained again, and
the ratio; for the requeue, the timeline between ``scontrol requeue`` and the
next start, sampled from ``scontrol show job`` every 0.25 s, against the floor
slurmctld reports (``cred_expire + 1``). Target: in place within checkpoint
time + 10 s of the drain being seen.

Usage: python bench/inplace.py [--stock-timings] [--window 120]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import tomllib
from slurmpre.drill.jobs import drill_spec
from slurmpre.drill.options import DrillOptions
from slurmpre.drill.run import bring_up, wait_whole
from slurmpre.drill.train import LOG
from slurmpre.folder.layout import FolderLayout
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import Checkpoint, Notice
from slurmpre.lines import sent_to
from slurmpre.login.submit import submit
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.sandbox.preempt import InBackground, PreemptPlan
from slurmpre.slurm.parse import requeue_floor

ROOT = Path(__file__).resolve().parent.parent


def jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait(what: str, probe: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := probe():
            return value
        time.sleep(0.25)
    raise SystemExit(f"bench: timed out waiting for {what}")


def one(box: Sandbox, work: Path, in_place: bool, window: float) -> dict[str, Any]:
    raw = tomllib.loads((ROOT / "examples" / "drill.toml").read_text())
    opts = DrillOptions(window=window, steps=600, step_seconds=0.1, every=1000)
    folder = work / ("in-place" if in_place else "requeue")
    spec = drill_spec(
        raw, opts, folder, in_place=in_place, name=folder.name, nodes="1-2", restart="requeue"
    )
    wait_whole(box)
    job_id = submit(spec, box.client).job_id
    log = folder / LOG
    job = wait("2 nodes", lambda: len((j := box.client.job(job_id)).nodes) == 2 and j, 120)
    wait("step 30", lambda: sum(e["event"] == "step" for e in jsonl(log)) >= 30, 180)
    victim = next(n for n in job.nodes if n != job.batch_host)
    preempt = InBackground(box, PreemptPlan(victim, window=window, return_after=5))
    preempt.start()
    samples: list[tuple[float, str, str]] = []  # time, state, reason
    while not (info := box.client.job(job_id)).finished:
        state = (info.state, info.reason or "")
        if not samples or samples[-1][1:] != state:
            samples.append((time.time(), *state))
        time.sleep(0.25)
    preempt.finish(timeout=window + 120)
    if info.state != "COMPLETED":
        raise SystemExit(f"bench: job {job_id} ended {info.state}; logs in {folder / 'logs'}")
    raw = jsonl(FolderLayout(folder).ledger)
    typed = Ledger(folder).records()
    notice = next(r for r in typed if isinstance(r, Notice))
    events = jsonl(log)
    # The checkpoint the notice asked for: "notice" when the script may go on after it, "stop"
    # when it is told to stop at once (as with an in-place restart or a requeue).
    saved = next(e for e in events if e["event"] == "save-end" and e["why"] in ("notice", "stop"))
    began = [e for e in events if e["event"] == "begin"]
    first_after = next(e for e in events if e["event"] == "step" and e["t"] > began[-1]["t"])
    checkpoint = next(r.seconds for r in typed if isinstance(r, Checkpoint) and r.after_notice)
    return {
        "job": job_id,
        "restarts": info.restarts,
        "worlds": [e["world"] for e in began],
        "checkpoint_s": checkpoint,
        "seen_to_saved_s": saved["t"] - notice.seen_at,
        "seen_to_training_s": first_after["t"] - notice.seen_at,
        "records": raw,
        "samples": samples,
        "floor_s": notice.requeue_floor_s,
    }


def timeline(run: dict[str, Any]) -> list[str]:
    requeued = next(r for r in run["records"] if r["event"] == "requeued")["requeued_at"]
    out = [f"    {'+s':>7}  state"]
    for at, state, reason in run["samples"]:
        if at >= requeued - 1:
            out.append(f"    {at - requeued:>+7.1f}  {state}{f' ({reason})' if reason else ''}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stock-timings", action="store_true")
    parser.add_argument("--window", type=float, default=120.0)
    parser.add_argument(
        "--quick", action="store_true", help="CI's smoke test: the timings that are up"
    )
    args = parser.parse_args()
    box = Sandbox.here()
    if args.quick and box.load() is not None:
        timings = box.current().timings  # whatever runs: the restarts are what is checked
    else:
        with sent_to(print, "slurmpre.drill", "slurmpre.sandbox"):
            timings = bring_up(box, DrillOptions(stock_timings=args.stock_timings))
    box.use()  # its Slurm commands first on PATH (26.05's are not the host's)
    floor = requeue_floor(box.client.config())
    work = Path(tempfile.mkdtemp(prefix="bench-inplace-", dir="/var/lib/slurmpre"))
    work.chmod(0o755)
    runs = {
        name: one(box, work, name == "in place", args.window) for name in ("in place", "requeue")
    }
    print(f"\nsandbox timings: {timings}; requeue floor (cred_expire + 1): {floor} s")
    print(f"  {'':<9} {'restarts':>8} {'worlds':>8} {'ckpt s':>7} {'seen→saved s':>13} "
          f"{'seen→training s':>16}")  # fmt: skip
    for name, run in runs.items():
        print(
            f"  {name:<9} {run['restarts']:>8} {'→'.join(map(str, run['worlds'])):>8} "
            f"{run['checkpoint_s']:>7.2f} {run['seen_to_saved_s']:>13.1f} "
            f"{run['seen_to_training_s']:>16.1f}"
        )
    ours, theirs = runs["in place"], runs["requeue"]
    ratio = theirs["seen_to_training_s"] / ours["seen_to_training_s"]
    target = ours["checkpoint_s"] + 10
    print(f"\nratio, requeue / in place (drain seen → training again): {ratio:.1f}x")
    verdict = "met" if ours["seen_to_training_s"] <= target else "MISSED"
    print(
        f"target, in place ≤ checkpoint + 10 s = {target:.1f} s: {verdict} "
        f"({ours['seen_to_training_s']:.1f} s)"
    )
    print("\nwhere a requeue's time goes (from scontrol requeue, 0.25 s samples):")
    for line in timeline(theirs):
        print(line)
    return 0 if ours["restarts"] == 0 and theirs["restarts"] == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
