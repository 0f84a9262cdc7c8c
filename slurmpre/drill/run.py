"""The drill on the sandbox: submit, preempt on schedule, watch, and collect what happened.
See docs/drill.md ("What it does").
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from slurmpre.drill import big_state, page, timeline
from slurmpre.drill.driver import Driver, drive, preemptible_nodes
from slurmpre.drill.jobs import drill_spec, load_example, seeds_script
from slurmpre.drill.options import DrillOptions, DrillResult
from slurmpre.drill.plan import Moment, schedule
from slurmpre.drill.train import FINAL
from slurmpre.errors import OtherShape, SandboxError, SlurmpreError
from slurmpre.login.submit import submit
from slurmpre.sandbox import shared_fs
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.sandbox.preempt import restore_all
from slurmpre.slurm.parse import format_version

LOG = logging.getLogger(__name__)


def _timeout(opts: DrillOptions, timings: str) -> float:
    per_restart = 200.0 if timings == "stock" else 90.0
    training = opts.training_steps() * (opts.step_seconds + 0.05) * 3
    return 300.0 + training + opts.preemptions * (per_restart + opts.window + opts.return_after)


def wait_whole(sandbox: Sandbox, timeout: float = 180.0) -> None:
    """Every preemptible node idle again before the next run starts."""
    deadline = time.monotonic() + timeout
    names = set(preemptible_nodes(sandbox))
    while time.monotonic() < deadline:
        nodes = [n for n in sandbox.client.nodes() if n.name in names]
        if nodes and all(n.state == "IDLE" and not n.flags for n in nodes):
            return
        time.sleep(0.5)
    raise SandboxError(f"the preemptible nodes were not all idle within {timeout:g} s")


def bring_up(
    sandbox: Sandbox,
    opts: DrillOptions,
    slurm: str | None = None,
    *,
    shared: tuple[Path, float] | None = None,
) -> str:
    """The sandbox with the drill's timings (and that Slurm release, and a shared dir of
    capped bandwidth, if given); restarted only when no job is queued on it. Says the
    release and timings it runs on, whether it started the sandbox or found it up (where
    `up` says only that)."""
    kw: dict[str, Any] = {"stock_timings": opts.stock_timings, "slurm": slurm}
    if shared is not None:
        kw.update(shared_dir=str(shared[0]), shared_mbps=shared[1])
    try:
        state = sandbox.up(**kw)
    except OtherShape:
        if _queued(sandbox):
            raise
        LOG.info("restarting the sandbox with the drill's timings and shape (no job was queued)")
        sandbox.down()
        state = sandbox.up(**kw)
    LOG.info(f"sandbox: Slurm {format_version(state.version)}, {state.timings} timings")
    return state.timings


def _queued(sandbox: Sandbox) -> bool:
    from slurmpre.cmd import run

    out = run(["squeue", "-h", "-o", "%i"], check=False, timeout=15, env=sandbox.env).stdout
    return bool(out.strip())


def run_drill(sandbox: Sandbox, opts: DrillOptions) -> DrillResult:
    opts.check()
    seed = opts.seed if opts.seed is not None else random.SystemRandom().randrange(2**32)
    LOG.info(f"drill seed {seed} (rerun the same preemptions with --seed {seed})")
    moments = schedule(opts.preemptions, seed)
    for i, m in enumerate(moments, 1):
        LOG.info(f"  preemption {i}: {m.describe()}")
    raw = load_example()
    shared = None
    if opts.big_state_mb and (why := shared_fs.missing()) is not None:
        LOG.info(f"no big-state scene: its capped shared dir needs FUSE, and {why}")
        opts = replace(opts, big_state_mb=0)
    if opts.big_state_mb:
        shared = (big_state.shared_dir(sandbox), opts.big_state_mbps())
    timings = bring_up(sandbox, opts, shared=shared)
    release = format_version(sandbox.current().version)
    sandbox.use()  # the jobs it submits, and what they run, use the sandbox's Slurm
    work = opts.workdir / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    work.mkdir(parents=True, exist_ok=True)
    LOG.info(f"folders: {work}")
    timeout = _timeout(opts, timings)
    wait_whole(sandbox)

    jobs: list[str] = []
    folders = {name: work / name for name in ("slurmpre", "reference", "seeds", "capacity")}
    try:
        runs = _runs(sandbox, opts, raw, work, moments, seed, timeout, jobs)
        if opts.big_state_mb:
            wait_whole(sandbox)
            runs[big_state.NAME], folders[big_state.NAME] = big_state.run_big_state(
                sandbox, opts, raw, work, timeout, jobs
            )
    except BaseException:
        _clean_up(sandbox, jobs)
        raise
    identical = _compare(folders, runs, opts)
    result = DrillResult(seed, opts, timings, moments, runs, identical, work, release)
    LOG.info(f"timelines: {result.save()} (slurmpre drill --report reads them again)")
    LOG.info(f"the runs side by side: {page.write(result)} (open it in a browser)")
    wait_whole(sandbox)
    return result


def _runs(
    sandbox: Sandbox,
    opts: DrillOptions,
    raw: dict[str, Any],
    work: Path,
    moments: list[Moment],
    seed: int,
    timeout: float,
    jobs: list[str],
) -> dict[str, timeline.Observed]:
    runs: dict[str, timeline.Observed] = {}
    ref_spec = drill_spec(
        raw, opts, work / "reference", name="drill-reference", nodes="1", constraint="standard"
    )
    spec = drill_spec(raw, opts, work / "slurmpre")
    started = time.time()
    jobs.append(ref_job := submit(ref_spec, sandbox.client).job_id)
    jobs.append(job := submit(spec, sandbox.client).job_id)
    LOG.info(
        f"submitted job {job} (slurmpre, {spec.nodes} preemptible nodes) and {ref_job} "
        "(uninterrupted reference, the standard node)"
    )

    capacity = (preemptible_nodes(sandbox), spec.nodes.min)

    def driver(mode: str, job_id: str, plan: list[Moment], at: float) -> Driver:
        rng = random.Random(seed)
        return Driver(sandbox, mode, job_id, work / mode, plan, opts, rng, at, capacity)

    runs["slurmpre"], runs["reference"] = drive(
        [driver("slurmpre", job, moments, started), driver("reference", ref_job, [], started)],
        timeout,
    )
    if opts.baseline:
        wait_whole(sandbox)
        # The same shape as slurmpre's job.
        script = seeds_script(work / "seeds", opts, str(spec.nodes), "drill-seeds-%j.out")
        started = time.time()
        jobs.append(seeds_job := sandbox.client.submit(script))
        LOG.info(f"submitted job {seeds_job} (the seeds' recipe, same preemptions)")
        (runs["seeds"],) = drive([driver("seeds", seeds_job, moments, started)], timeout)
    if opts.capacity:
        from slurmpre.drill.capacity import run_capacity

        wait_whole(sandbox)
        runs["capacity"] = run_capacity(sandbox, opts, raw, work, timeout, jobs)
    return runs


def _clean_up(sandbox: Sandbox, jobs: list[str]) -> None:
    """After a failure or Ctrl-C: cancel the drill's jobs, put every node back in service."""
    client = sandbox.client
    for job_id in jobs:
        with contextlib.suppress(SlurmpreError):
            client.cancel(job_id)
    with contextlib.suppress(SlurmpreError):
        restore_all(sandbox)


def _compare(
    folders: dict[str, Path], runs: dict[str, timeline.Observed], opts: DrillOptions
) -> dict[str, bool]:
    """Each run's final weights against the uninterrupted result, bit for bit (and the
    big state's rows, for a run that carried one)."""
    import torch

    from slurmpre.drill.train import reference

    out = {}
    for name in runs:
        try:
            got = torch.load(folders[name] / FINAL)
        except (OSError, RuntimeError):
            out[name] = False
            continue
        scene = name == big_state.NAME
        expected = reference((big_state.scene_options(opts) if scene else opts).training_steps())
        same = got["step"] == expected["step"] and torch.equal(got["w"], expected["w"])
        if scene:
            same = same and got.get("rows") == expected["rows"]
        out[name] = bool(same)
    return out
