"""A big state on a slow shared volume: the node-local tier against saving straight to the
checkpoint folder and against the seeds' recipe, side by side in one run (#51).

The job (`big_state_train.py`, torchrun over gloo): ``--state-mb`` MB of float32 saved
with DCP, a step every 0.5 s, a periodic checkpoint every K steps; its checkpoint folder
on the sandbox's shared filesystem capped at ``--mbps`` MB/s (`sandbox up --shared-dir`),
so a save there takes ``state / mbps`` seconds (1500 MB at 16 MB/s: 94 s, longer than
the 60 s window). Each scenario is drained once the provider's way (drain; the node
removed at the window's end, back 15 s later) right after its second periodic save:

- ``1 node, local tier``: ``local_dir = "auto"`` (saves on the node, a flush in the
  background, the successor pulls the after-notice save from the drained node);
- ``1 node, no tier``: every save straight into the checkpoint folder;
- ``1 node, seeds' recipe``: ``--requeue``, the same periodic saves, resume from the
  highest-numbered one (a requeue waits >= 121 s on stock timings);
- ``2 nodes, batch host drains`` and ``2 nodes, other node drains``: the tier, two ranks
  of a sharded DCP state, handed to a successor on a free node (which pulls both ranks'
  shards) and restarted in place;
- ``2 nodes, other node lost``: no drain, the other node's slurmd killed (Slurm requeues);
- ``1 node, pull cut midway``: the tier, the node removed as soon as the successor's pull
  of the notice save has begun: it must resume from the folder (`big_state_cut.py`);
- ``1 node + spare, local tier``: the tier and ``spare_nodes = 1`` (the batch host held,
  not training): the next step starts on the spare at the notice, beside the training,
  and pulls its save from the drained node (in place, no successor, no requeue).

The sandbox has three preemptible nodes (and a standard one) and every job asks for
whole nodes (``--exclusive``, as a GPU job has them), so a successor starts on a free
node, never beside its predecessor; ``--shared-nodes`` lets Slurm put them side by side.

Printed per scenario: the periodic saves' stall (max, median), drain seen → first step
of the next attempt, steps trained twice, whether the resumed state was exact and the
final state an uninterrupted run's (sha256), the pull and flushes (the ledger), and the
peak memory per node (`big_state_memory`); then the ratios. Exits non-zero when a
slurmpre run failed, lost a step it had the time to save, resumed an inexact state,
ended with another state or left a job queued.

Usage: python bench/big_state.py [--tuned-timings] [--state-mb 1500] [--mbps 16]
            [--window 60] [--only NAME]... [--shared-nodes] [--keep] [--quick]
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurmpre import environment
from slurmpre.drill.jobs import TORCHRUN
from slurmpre.drill.run import wait_whole
from slurmpre.errors import UsageError
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import Replicated, Saved
from slurmpre.lines import sent_to
from slurmpre.login.spec import validate
from slurmpre.login.status import chain
from slurmpre.login.submit import submit
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.sandbox.preempt import (
    InBackground,
    PreemptPlan,
    keep_down,
    remove_node,
    restore_all,
    restore_node,
)
from slurmpre.slurm.parse import format_version, requeue_floor

from big_state_cut import cut, judge
from big_state_memory import Memory, clear_local
from big_state_report import measure, read, tables, verdict
from big_state_train import LOG
from inplace import wait  # bench/: the in-place bench's helper

TRAIN = Path(__file__).resolve().parent / "big_state_train.py"
SHARED = Path("/var/tmp/slurmpre-bench-big")  # + sandbox<N>: the capped shared dir
NODES, PREEMPTIBLE = 4, 3  # a free preemptible node for a two-node job's successor
STEP_S = 0.5
SAVES_BEFORE = 2  # periodic saves before the drain
RETURN_AFTER = 15  # the drained node is back this long after its removal (bench/successor.py)
SEEDS_SCRIPT = """#!/bin/bash
#SBATCH --job-name=big-seeds
#SBATCH --nodes={nodes}
#SBATCH --constraint=preemptible
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output={log}
{exclusive}
# The seeds' recipe (slurmpre.drill.jobs.SEEDS_SCRIPT), with this bench's training job.
export GLOO_SOCKET_IFNAME=lo
export {checkpoint_dir}={ckpt}
srun --ntasks-per-node=1 {python} {launch}{script} {args} --mode seeds
"""


@dataclass(frozen=True)
class Scenario:
    name: str
    nodes: str  # the job's `nodes` ("1", or "1-2": it goes on with one)
    victim: str  # "batch host" or "other node"
    how: str  # "tier", "no tier" or "seeds"
    spares: int = 0  # `spare_nodes`: held beside the nodes that train

    @property
    def slug(self) -> str:
        return re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-")


SCENARIOS = (
    Scenario("1 node, local tier", "1", "batch host", "tier"),
    Scenario("1 node, no tier", "1", "batch host", "no tier"),
    Scenario("1 node, seeds' recipe", "1", "batch host", "seeds"),
    Scenario("2 nodes, batch host drains", "1-2", "batch host", "tier"),
    Scenario("2 nodes, other node drains", "1-2", "other node", "tier"),
    Scenario("2 nodes, other node lost", "1-2", "lost", "tier"),  # no drain: slurmd killed
    # drained, then removed as soon as the successor's pull has begun (big_state_cut.py)
    Scenario("1 node, pull cut midway", "1", "pull cut", "tier"),
    Scenario("1 node + spare, local tier", "1", "other node", "tier", spares=1),
)


@dataclass(frozen=True)
class Setup:
    state_mb: int
    mbps: float
    window: float
    every: int
    steps: int
    exclusive: bool
    keep: bool

    def train_args(self) -> list[str]:
        return ["--state-mb", str(self.state_mb), "--steps", str(self.steps),
                "--every", str(self.every), "--step-seconds", f"{STEP_S:g}"]  # fmt: skip

    @property
    def save_s(self) -> float:
        """A save of the whole state at the cap, at the least."""
        return self.state_mb / self.mbps


def bring_up(box: Sandbox, stock: bool, mbps: float) -> Any:
    """The sandbox with a capped shared dir; one up in another shape is brought down first
    (when nothing is queued on it)."""
    shared = SHARED / f"sandbox{box.instance.number}"
    kw: dict[str, Any] = {"stock_timings": stock, "shared_dir": str(shared), "shared_mbps": mbps}
    with sent_to(print, "slurmpre.sandbox"):
        try:
            return box.up(NODES, PREEMPTIBLE, **kw)
        except UsageError:
            if box.load() is not None and queued(box, None):
                raise
            print("bench: the sandbox is up in another shape, nothing queued: down, then up")
            box.down()
            return box.up(NODES, PREEMPTIBLE, **kw)


def queued(box: Sandbox, jobs: list[str] | None) -> list[str]:
    """The jobs of ``jobs`` (None: any) that squeue still shows."""
    out = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True,
                         timeout=30, env=box.env).stdout.split()  # fmt: skip
    return [j for j in out if jobs is None or j in jobs]


def start(box: Sandbox, sc: Scenario, folder: Path, setup: Setup) -> str:
    if sc.how == "seeds":
        (folder / "logs").mkdir(parents=True)
        script = SEEDS_SCRIPT.format(
            nodes=sc.nodes,
            log=shlex.quote(str(folder / "logs" / "seeds-%j.out")),
            exclusive="#SBATCH --exclusive" if setup.exclusive else "",
            checkpoint_dir=environment.CHECKPOINT_DIR,
            ckpt=shlex.quote(str(folder)),
            python=shlex.quote(sys.executable),
            launch=TORCHRUN,
            script=shlex.quote(str(TRAIN)),
            args=" ".join(setup.train_args()),
        )
        return box.client.submit(script)
    spec = validate(
        {
            "name": f"big-{sc.slug}",
            "command": [sys.executable, str(TRAIN), *setup.train_args()],
            "nodes": sc.nodes,
            "checkpoint_dir": str(folder),
            "preempt_window": int(setup.window),
            "safety_margin": 5,
            "poll_interval": 1,
            "local_dir": "auto" if sc.how == "tier" else "off",
            "grow": False,  # one hand-over per scenario: the drained node comes back
            "extra_sbatch": ["--exclusive"] if setup.exclusive else [],
            "env": {"GLOO_SOCKET_IFNAME": "lo"},
            **({"spare_nodes": sc.spares} if sc.spares else {}),
        }
    )
    return submit(spec, box.client).job_id


def run(box: Sandbox, work: Path, sc: Scenario, setup: Setup) -> dict[str, Any]:
    """One scenario, start to end: what `measure` finds, or why it failed."""
    folder = work / sc.slug
    wait_whole(box)
    clear_local(box)
    first = start(box, sc, folder, setup)
    print(f"bench: {sc.name}: job {first}, checkpoint folder {folder}", flush=True)
    want = (2 if sc.nodes == "1-2" else 1) + sc.spares
    job = wait(f"{want} node(s)", lambda: len((j := box.client.job(first)).nodes) >= want and j,
               180)  # fmt: skip
    memory = Memory(box)
    memory.start()
    drained, cut_at = None, dict[str, Any]()
    try:
        if saves(box, folder, first, sc, setup):
            batch = job.batch_host or job.nodes[0]
            victim = (
                next(n for n in job.nodes if n != batch)
                if sc.victim in ("other node", "lost")
                else batch
            )
            if sc.victim == "lost":
                drained = lose(box, victim, folder, first, sc)
            elif sc.victim == "pull cut":
                say = lambda line: print(f"  {sc.name}: {line}", flush=True)  # noqa: E731
                cut_at = cut(box, victim, setup.window, RETURN_AFTER, say)
                wait("the run's end", lambda: box.client.job(last_job(folder, first, sc)).finished,
                     3600)  # fmt: skip
                drained = cut_at["drained"]
            else:
                drained = drain(box, victim, folder, first, sc, setup)
    finally:
        memory.stop()
    records = Ledger(folder).records() if sc.how != "seeds" else []
    out: dict[str, Any] = {"jobs": chain(records, first) if records else [first]}
    out.update(left=queued(box, out["jobs"]), memory=memory.peaks(setup.state_mb),
               load_max=memory.load_max)  # fmt: skip
    state = box.client.job(out["jobs"][-1]).state
    if state != "COMPLETED" or drained is None:
        out.update(failed=f"job {out['jobs'][-1]} ended {state}; logs in {folder / 'logs'}",
                   errors=errors(folder / "logs"))  # fmt: skip
    else:
        out.update(measure(folder, records, drained, setup.state_mb, setup.steps))
        if sc.victim == "pull cut":
            out.update(judge(folder, out["jobs"], cut_at, dict(box.env)))
    out["leftover_mb"] = clear_local(box) / 1e6  # what the nodes' folders still held
    if not setup.keep:
        for entry in folder.iterdir():  # the checkpoints (GBs): the logs and ledger stay
            if entry.name.startswith(("step-", ".incoming-")):
                shutil.rmtree(entry, ignore_errors=True)
    return out


def saves(box: Sandbox, folder: Path, first: str, sc: Scenario, setup: Setup) -> bool:
    """Wait for the periodic saves before the drain; False when the job ended first."""
    deadline = time.monotonic() + SAVES_BEFORE * (setup.every * STEP_S + 3 * setup.save_s) + 300
    while (
        sum(e["event"] == "save" and e["why"] == "periodic" for e in read(folder / LOG))
        < SAVES_BEFORE
    ):
        if box.client.job(last_job(folder, first, sc)).finished:
            return False
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: {sc.name}: no {SAVES_BEFORE} periodic saves in time")
        time.sleep(1)
    return True


def drain(box: Sandbox, victim: str, folder: Path, first: str, sc: Scenario, setup: Setup) -> float:
    """Preempt ``victim`` the provider's way and wait for the run to end; when it drained."""
    plan = PreemptPlan(victim, window=setup.window, return_after=RETURN_AFTER)
    preempt = InBackground(box, plan)
    preempt.start()
    deadline = time.monotonic() + 3600
    shown = 0
    while not box.client.job(last_job(folder, first, sc)).finished:
        for event in preempt.events[shown:]:  # the preemption's timeline, as it happens
            print(f"  {sc.name}: {event.line()}", flush=True)
            shown += 1
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: {sc.name} did not end; logs in {folder / 'logs'}")
        time.sleep(1)
    events = preempt.finish(timeout=setup.window + 300)
    for event in events[shown:]:
        print(f"  {sc.name}: {event.line()}", flush=True)
    return events[0].at


def lose(box: Sandbox, victim: str, folder: Path, first: str, sc: Scenario) -> float:
    """Take ``victim`` away with no drain once each node keeps the other's part of the newest
    save (its slurmd and job processes killed, its RAM gone, marked DOWN; the job dies with
    it and Slurm requeues it), bring it back, and wait for the run to end; when it went."""
    ledger = Ledger(folder)

    def kept() -> bool:
        records = ledger.records()
        newest = max((r.step for r in records if isinstance(r, Saved)), default=None)
        return len({r.node for r in records if isinstance(r, Replicated) and r.step == newest}) == 2

    wait("each node keeping the other's part of the newest save", kept, 300)
    went = time.time()
    remove_node(box, victim)
    box.client.update_node(victim, state="DOWN", reason="lost")
    keep_down(box, victim, "lost")
    print(f"  {sc.name}: {victim} lost without notice: slurmd and its job processes killed, "
          "its node-local folder emptied, marked DOWN", flush=True)  # fmt: skip
    wait("the job requeued", lambda: box.client.job(first).state == "PENDING", 300)
    restore_node(box, victim)
    wait("the run's end", lambda: box.client.job(last_job(folder, first, sc)).finished, 3600)
    return went


def errors(logs: Path, most: int = 4) -> list[str]:
    """The last lines of the logs that name an error, once each (a failed run's why)."""
    seen: list[str] = []
    for path in sorted(logs.glob("*.out")):
        for line in path.read_text(errors="replace").splitlines():
            if re.search(r"Error:|error:|slurmpre: skipping", line) and line not in seen:
                seen.append(line.strip()[:300])
    return seen[-most:]


def last_job(folder: Path, first: str, sc: Scenario) -> str:
    return first if sc.how == "seeds" else chain(Ledger(folder).records(), first)[-1]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tuned-timings", action="store_true")
    parser.add_argument("--state-mb", type=int, default=None, help="1500 (--quick: 150)")
    parser.add_argument("--mbps", type=float, default=16.0)
    parser.add_argument("--window", type=float, default=None, help="60 s (--quick: 30 s)")
    parser.add_argument("--only", action="append", choices=[s.name for s in SCENARIOS])
    parser.add_argument(
        "--shared-nodes", action="store_true", help="no --exclusive: jobs may share a node"
    )
    parser.add_argument("--keep", action="store_true", help="keep the checkpoints")
    parser.add_argument(
        "--quick", action="store_true",
        help="CI's smoke test: 150 MB, tuned timings, one node with and without the tier",
    )  # fmt: skip
    args = parser.parse_args()
    state_mb = args.state_mb or (150 if args.quick else 1500)
    window = args.window or (30.0 if args.quick else 60.0)
    # Periodic saves further apart than the window (the seeds' job must not be cut in the
    # middle of one, or its recipe resumes from a partial folder), and steps enough that
    # the job trains on after the window: no third save (the quick mode runs no seeds).
    every = 30 if args.quick else round((window + 40) / STEP_S)
    steps = every * SAVES_BEFORE + (40 if args.quick else round(window / STEP_S) + 60)
    setup = Setup(state_mb, args.mbps, window, every, steps, not args.shared_nodes, args.keep)
    names = args.only or [s.name for s in SCENARIOS[: 2 if args.quick else None]]
    box = Sandbox.here()
    state = bring_up(box, not (args.tuned_timings or args.quick), args.mbps)
    box.use()
    work = Path(tempfile.mkdtemp(prefix="big-state-", dir=state.shared["dir"]))
    work.chmod(0o755)
    load = os.getloadavg()
    try:
        results = {sc: run(box, work, sc, setup) for sc in SCENARIOS if sc.name in names}
    except BaseException:
        for job in queued(box, None):  # the bench's own sandbox: its jobs are the bench's
            box.client.cancel(job)
        with sent_to(print, "slurmpre.sandbox"):
            restore_all(box)
        raise
    print(
        f"\nSlurm {format_version(box.client.version())}; sandbox timings: {state.timings} "
        f"(requeue floor, cred_expire + 1: {requeue_floor(box.client.config())} s); "
        f"{NODES} nodes ({PREEMPTIBLE} preemptible), "
        f"{'whole nodes (--exclusive)' if setup.exclusive else 'shared nodes'}; state "
        f"{state_mb} MB of float32 saved with DCP; checkpoint folder on a shared dir capped at "
        f"{args.mbps:g} MB/s (a save there >= {setup.save_s:.0f} s); window {window:g} s; a "
        f"step every {STEP_S:g} s, a periodic save every {every} steps, the drain after "
        f"{SAVES_BEFORE}, {steps} steps in all"
    )
    end = os.getloadavg()
    print(f"load average (1, 5, 15 min; 2 cores) at the start {load[0]:.1f} {load[1]:.1f} "
          f"{load[2]:.1f}, at the end {end[0]:.1f} {end[1]:.1f} {end[2]:.1f}; in {work}")  # fmt: skip
    tables(results, state_mb)
    ok = verdict(results, setup.save_s, window)
    if args.quick:
        with sent_to(print, "slurmpre.sandbox"):
            box.down()  # the lane's next benchmark brings its own shape up
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
