"""The drill on the sandbox: submit, preempt on schedule, watch, and collect what happened.

The job is `examples/drill.toml` through `slurmpre.login.submit`, as a user would
submit it: the template, the wrapper and the watcher all take part. An
uninterrupted copy runs at the same time on the standard node (its weights and
wall time are the reference); with ``baseline`` the seeds' recipe then runs
under the same schedule of preemptions, on the same two preemptible nodes.
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slurmpre.drill import timeline
from slurmpre.drill.jobs import drill_spec, load_example, seeds_script
from slurmpre.drill.options import DrillOptions, DrillResult
from slurmpre.drill.plan import Moment, schedule
from slurmpre.drill.train import FINAL, LOG
from slurmpre.errors import SandboxError, SlurmpreError, UsageError
from slurmpre.folder import records
from slurmpre.folder.layout import FolderLayout
from slurmpre.folder.ledger import Ledger
from slurmpre.login.submit import submit
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.sandbox.preempt import InBackground, PreemptPlan, restore_node
from slurmpre.slurm import states

POLL = 0.25


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue  # the line being written
        if isinstance(value, dict):
            out.append(value)
    return out


class Driver:
    """Runs one job to its end, preempting it at the schedule's moments; follows the run
    into each job that takes over from the one before (a successor)."""

    def __init__(
        self,
        sandbox: Sandbox,
        mode: str,
        job_id: str,
        folder: Path,
        moments: list[Moment],
        opts: DrillOptions,
        rng: random.Random,
        say: Callable[[str], None],
        submitted_at: float,
        capacity: tuple[tuple[str, ...], int] = ((), 1),
    ) -> None:
        self.sandbox, self.client = sandbox, sandbox.client
        self.capacity = capacity  # the cluster's preemptible nodes, how many the job needs
        self.mode, self.job_id, self.folder = mode, job_id, folder
        self.pending = list(moments)
        self.opts, self.rng, self.say = opts, rng, say
        self.submitted_at = submitted_at
        self.samples: list[timeline.Sample] = []
        self.hits: list[timeline.Hit] = []
        self.threads: list[tuple[InBackground, Moment, int]] = []
        self.preempted: set[int] = set()
        self.shown = 0
        self.shown_ledger = 0
        # The run's jobs, first to last, and the run's restarts before each.
        self.chain: dict[str, int] = {job_id: 0}
        self.ended: dict[str, str] = {}  # job -> its final state
        self.attempt_ids: dict[int, tuple[str, int]] = {}

    def _say(self, what: str) -> None:
        self.say(f"[{self.mode} {time.time() - self.submitted_at:6.1f}s] {what}")

    def step(self) -> bool:
        """One look at the run's jobs; False once the last has ended."""
        now = time.time()
        log = read_jsonl(self.folder / LOG)
        self._show(log)
        newest: tuple[str, int, Any] | None = None
        for job_id, before in list(self.chain.items()):
            if job_id in self.ended:
                continue
            job = self.client.job(job_id)
            attempt = before + job.restarts
            if job.state == states.RUNNING:
                self.attempt_ids.setdefault(attempt, (job_id, job.restarts))
            self.samples.append(timeline.Sample(now, job.state, attempt, job.nodes, job_id))
            successor = self._successor(job_id)
            if successor is not None and successor not in self.chain:
                self.chain[successor] = attempt + 1
                self._say(f"job {successor} takes over from job {job_id}")
            if job.finished:
                self.ended[job_id] = job.state
                continue
            newest = (job_id, attempt, job)
        if newest is None:
            return False
        _, attempt, job = newest
        if self.pending and job.state == states.RUNNING and attempt not in self.preempted:
            moment = self.pending[0]
            if self._due(moment, attempt, log):
                self._preempt(moment, attempt, job.nodes)
        return True

    def _successor(self, job_id: str) -> str | None:
        if self.mode != "slurmpre":
            return None
        for r in Ledger(self.folder, warn=lambda _: None).records():
            if isinstance(r, records.Successor) and r.job == job_id:
                return r.successor
        return None

    def _due(self, moment: Moment, attempt: int, log: list[dict[str, Any]]) -> bool:
        mine = [e for e in log if e.get("attempt") == attempt]
        steps = [e for e in mine if e.get("event") == "step"]
        if moment.kind == "startup":
            return not steps
        if moment.kind == "checkpoint":
            return (
                bool(mine)
                and mine[-1].get("event") == "save-start"
                and mine[-1]["why"] == "periodic"
            )
        begin = [e for e in mine if e.get("event") == "begin"]
        return bool(begin) and len(steps) >= moment.after

    def _preempt(self, moment: Moment, attempt: int, nodes: tuple[str, ...]) -> None:
        usable = {n.name for n in self.client.nodes(list(nodes)) if n.usable}
        candidates = [n for n in nodes if n in usable]
        if not candidates:
            return
        node = self.rng.choice(sorted(candidates))
        plan = PreemptPlan(node, window=self.opts.window, return_after=self.opts.return_after)
        thread = InBackground(self.sandbox, plan)
        thread.start()
        self.pending.pop(0)
        self.preempted.add(attempt)
        self.threads.append((thread, moment, attempt))
        self._say(f"drain {node} {moment.describe()} (attempt {attempt})")

    def _show(self, log: list[dict[str, Any]]) -> None:
        for e in log[self.shown :]:
            kind = e.get("event")
            if kind == "begin":
                world, start = e["world"], e["resumed_step"]
                self._say(f"attempt {e['attempt']} trains on {world} node(s) from step {start}")
            elif kind == "step" and e["step"] % 40 == 0:
                self._say(f"step {e['step']}")
            elif kind == "save-end" and e.get("why") == "notice":
                self._say(f"checkpoint of step {e['step']} written on the notice")
            elif kind == "done":
                self._say(f"training done at step {e['step']}")
        self.shown = len(log)
        if self.mode != "slurmpre":
            return
        ledger = Ledger(self.folder, warn=lambda _: None).records()
        for r in ledger[self.shown_ledger :]:
            if isinstance(r, records.Notice) and r.first:
                self._say(f"slurmpre saw the notice ({r.kind} of {r.node})")
            elif isinstance(r, records.Requeued):
                self._say(f"slurmpre requeued the job ({r.why})")
            elif isinstance(r, records.Waiting):
                self._say(f"job {r.job} is ready and waits for job {r.predecessor}")
            elif isinstance(r, records.Stopping):
                self._say(f"slurmpre asked job {r.job} to checkpoint and stop ({r.why})")
        self.shown_ledger = len(ledger)

    def collect(self) -> timeline.Observed:
        """What happened, once the job has ended and each preemption has run its course."""
        ended = self.samples[-1].t if self.samples else time.time()
        for thread, moment, attempt in self.threads:
            at = [e.at for e in thread.finish()]
            self.hits.append(
                timeline.Hit(
                    moment.kind,
                    attempt,
                    thread.plan.node,
                    drained_at=at[0],
                    removed_at=at[1] if len(at) > 1 else None,
                    returned_at=at[2] if len(at) > 2 else None,
                )
            )
        last = list(self.chain)[-1]
        return timeline.Observed(
            self.mode,
            self.job_id,
            self.submitted_at,
            ended,
            self.ended.get(last, "UNKNOWN"),
            read_jsonl(self.folder / LOG),
            self.samples,
            self.hits,
            read_jsonl(FolderLayout(self.folder).ledger),
            attempt_ids=dict(self.attempt_ids),
            jobs=list(self.chain),
            capacity=self.capacity[0],
            nodes_needed=self.capacity[1],
        )


def drive(drivers: list[Driver], timeout: float) -> list[timeline.Observed]:
    """Look at every job in turn until all have ended; then collect each."""
    deadline = time.monotonic() + timeout
    running = list(drivers)
    while running:
        running = [d for d in running if d.step()]
        if running and time.monotonic() > deadline:
            for d in running:
                for job_id in d.chain:
                    with contextlib.suppress(SlurmpreError):
                        d.client.cancel(job_id)
            names = ", ".join(f"{d.job_id} ({d.mode})" for d in running)
            raise SlurmpreError(
                f"drill: job {names} did not finish within {timeout:g} s; cancelled "
                f"(logs in {running[0].folder / 'logs'})"
            )
        time.sleep(POLL)
    return [d.collect() for d in drivers]


def _timeout(opts: DrillOptions, timings: str) -> float:
    per_restart = 200.0 if timings == "stock" else 90.0
    training = opts.training_steps() * (opts.step_seconds + 0.05) * 3
    return 300.0 + training + opts.preemptions * (per_restart + opts.window + opts.return_after)


def preemptible_nodes(sandbox: Sandbox) -> tuple[str, ...]:
    return tuple(sorted(n.name for n in sandbox.client.nodes() if "preemptible" in n.features))


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
    sandbox: Sandbox, opts: DrillOptions, say: Callable[[str], None], slurm: str | None = None
) -> str:
    """The sandbox with the drill's timings (and that Slurm release, if given); restarted
    only when no job is queued on it."""
    try:
        state = sandbox.up(stock_timings=opts.stock_timings, slurm=slurm, say=say)
    except UsageError:
        if _queued(sandbox):
            raise
        say("restarting the sandbox with the drill's timings and shape (no job was queued)")
        sandbox.down(say=say)
        state = sandbox.up(stock_timings=opts.stock_timings, slurm=slurm, say=say)
    return state.timings


def _queued(sandbox: Sandbox) -> bool:
    from slurmpre.cmd import run

    out = run(["squeue", "-h", "-o", "%i"], check=False, timeout=15, env=sandbox.env).stdout
    return bool(out.strip())


def run_drill(
    sandbox: Sandbox, opts: DrillOptions, *, say: Callable[[str], None] = print
) -> DrillResult:
    opts.check()
    seed = opts.seed if opts.seed is not None else random.SystemRandom().randrange(2**32)
    say(f"drill seed {seed} (rerun the same preemptions with --seed {seed})")
    moments = schedule(opts.preemptions, seed)
    for i, m in enumerate(moments, 1):
        say(f"  preemption {i}: {m.describe()}")
    raw = load_example()
    timings = bring_up(sandbox, opts, say)
    sandbox.use()  # the jobs it submits, and what they run, use the sandbox's Slurm
    say(f"sandbox timings: {timings}")
    work = opts.workdir / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    work.mkdir(parents=True, exist_ok=True)
    say(f"folders: {work}")
    timeout = _timeout(opts, timings)
    wait_whole(sandbox)

    jobs: list[str] = []
    try:
        runs = _runs(sandbox, opts, raw, work, moments, seed, timeout, jobs, say)
    except BaseException:
        _clean_up(sandbox, jobs, say)
        raise
    identical = _compare(work, runs, opts.training_steps())
    result = DrillResult(seed, opts, timings, moments, runs, identical, work)
    say(f"timelines: {result.save()} (slurmpre drill --report reads them again)")
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
    say: Callable[[str], None],
) -> dict[str, timeline.Observed]:
    runs: dict[str, timeline.Observed] = {}
    ref_spec = drill_spec(
        raw, opts, work / "reference", name="drill-reference", nodes="1", constraint="standard"
    )
    spec = drill_spec(raw, opts, work / "slurmpre")
    started = time.time()
    jobs.append(ref_job := submit(ref_spec, sandbox.client).job_id)
    jobs.append(job := submit(spec, sandbox.client).job_id)
    say(
        f"submitted job {job} (slurmpre, {spec.nodes} preemptible nodes) and {ref_job} "
        "(uninterrupted reference, the standard node)"
    )

    capacity = (preemptible_nodes(sandbox), spec.nodes.min)

    def driver(mode: str, job_id: str, plan: list[Moment], at: float) -> Driver:
        rng = random.Random(seed)
        return Driver(sandbox, mode, job_id, work / mode, plan, opts, rng, say, at, capacity)

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
        say(f"submitted job {seeds_job} (the seeds' recipe, same preemptions)")
        (runs["seeds"],) = drive([driver("seeds", seeds_job, moments, started)], timeout)
    return runs


def _clean_up(sandbox: Sandbox, jobs: list[str], say: Callable[[str], None]) -> None:
    """After a failure or Ctrl-C: cancel the drill's jobs, put every node back in service."""
    client = sandbox.client
    for job_id in jobs:
        with contextlib.suppress(SlurmpreError):
            client.cancel(job_id)
    with contextlib.suppress(SlurmpreError):
        for node in client.nodes():
            if node.down:
                say(f"bringing {node.name} back")
                restore_node(sandbox, node.name)
            elif node.draining:
                client.update_node(node.name, state="RESUME")


def _compare(work: Path, runs: dict[str, timeline.Observed], steps: int) -> dict[str, bool]:
    """Each run's final weights against the uninterrupted result, bit for bit."""
    import torch

    from slurmpre.drill.train import reference

    expected = reference(steps)
    out = {}
    for name in runs:
        path = work / name / FINAL
        try:
            got = torch.load(path)
        except (OSError, RuntimeError):
            out[name] = False
            continue
        out[name] = bool(got["step"] == expected["step"] and torch.equal(got["w"], expected["w"]))
    return out
