"""The drill's driver: runs one job to its end, preempting it at the schedule's moments,
following the run into each job that takes over, and collects what it saw
(`timeline.Observed`)."""

from __future__ import annotations

import contextlib
import json
import logging
import random
import time
from pathlib import Path
from typing import Any

from slurmpre.drill import timeline
from slurmpre.drill.options import DrillOptions
from slurmpre.drill.plan import Moment
from slurmpre.drill.train import LOG as TRAINING_LOG
from slurmpre.errors import SlurmpreError
from slurmpre.folder import records
from slurmpre.folder.layout import FolderLayout
from slurmpre.folder.ledger import Ledger
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.sandbox.preempt import InBackground, PreemptPlan
from slurmpre.slurm import states

LOG = logging.getLogger(__name__)

POLL = 0.25


def preemptible_nodes(sandbox: Sandbox) -> tuple[str, ...]:
    return tuple(sorted(n.name for n in sandbox.client.nodes() if "preemptible" in n.features))


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
        submitted_at: float,
        capacity: tuple[tuple[str, ...], int] = ((), 1),
        returns: tuple[str, int] | None = None,
    ) -> None:
        """``returns``: a drained node to put back in service once the run has trained
        this many steps (the capacity scene)."""
        self.sandbox, self.client = sandbox, sandbox.client
        self.capacity = capacity  # the cluster's preemptible nodes, how many the job needs
        self.mode, self.job_id, self.folder = mode, job_id, folder
        self.pending = list(moments)
        self.opts, self.rng = opts, rng
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
        self.returns = returns
        self.returned: tuple[str, float] | None = None

    def _say(self, what: str) -> None:
        LOG.info(f"[{self.mode} {time.time() - self.submitted_at:6.1f}s] {what}")

    def step(self) -> bool:
        """One look at the run's jobs; False once the last has ended."""
        now = time.time()
        log = read_jsonl(self.folder / TRAINING_LOG)
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
        self._capacity_back(log)
        _, attempt, job = newest
        if self.pending and job.state == states.RUNNING and attempt not in self.preempted:
            moment = self.pending[0]
            if self._due(moment, attempt, log):
                self._preempt(moment, attempt, job.nodes)
        return True

    def _capacity_back(self, log: list[dict[str, Any]]) -> None:
        if self.returns is None or self.returned is not None:
            return
        node, after = self.returns
        if sum(e.get("event") == "step" for e in log) >= after:
            self.client.update_node(node, state="RESUME")
            self.returned = (node, time.time())
            self._say(f"{node} is back: preemptible capacity returns")

    @property
    def follows(self) -> bool:
        """Its jobs hand over to successors (slurmpre's), and keep a ledger."""
        return self.mode not in ("seeds", "reference")

    def _successor(self, job_id: str) -> str | None:
        if not self.follows:
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
        if not self.follows:
            return
        ledger = Ledger(self.folder, warn=lambda _: None).records()
        for r in ledger[self.shown_ledger :]:
            if isinstance(r, records.Notice) and r.first and r.kind == "grow":
                self._say(f"slurmpre grows: {r.reason}")
            elif isinstance(r, records.Notice) and r.first:
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
        ledger = read_jsonl(FolderLayout(self.folder).ledger)
        finished = {r.get("job") for r in ledger if r.get("event") == "requeue_skipped"
                    and "finished its work" in str(r.get("why"))}  # fmt: skip
        return timeline.Observed(
            self.mode,
            self.job_id,
            self.submitted_at,
            ended,
            run_state(list(self.chain), self.ended, finished),
            read_jsonl(self.folder / TRAINING_LOG),
            self.samples,
            self.hits,
            ledger,
            attempt_ids=dict(self.attempt_ids),
            jobs=list(self.chain),
            capacity=self.capacity[0],
            nodes_needed=self.capacity[1],
            returned=self.returned,
        )


def run_state(chain: list[str], ended: dict[str, str], finished: set[str | None]) -> str:
    """The run's end: its last job's, but for a successor cancelled because the job
    before it finished the work after its notice (that job's watcher called it off: a
    drain in the run's last steps), whose end is the run's."""
    jobs = list(chain)
    while len(jobs) > 1 and ended.get(jobs[-1]) == states.CANCELLED and jobs[-2] in finished:
        jobs.pop()
    return ended.get(jobs[-1], "UNKNOWN")


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
