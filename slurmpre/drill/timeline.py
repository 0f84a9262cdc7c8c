"""What the drill records of a run (``timelines.json``): Slurm's states as sampled, the
training's log, slurmpre's ledger and the preemptions the drill made; the report
(`drill.report`) is a pure function of these, so it can be computed again, and tested,
without a cluster.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurmpre.errors import UsageError
from slurmpre.slurm.states import HOLDING_NODES

if TYPE_CHECKING:
    from slurmpre.folder.records import Record
    from slurmpre.login.resizes import Resize
    from slurmpre.login.status import JobStatus

FILE = "timelines.json"
SCHEMA = 1


@dataclass(frozen=True)
class Sample:
    """The job as Slurm showed it at wall time ``t``."""

    t: float
    state: str
    restarts: int  # the run's attempt: its restarts so far, across its jobs
    nodes: tuple[str, ...]
    job: str = ""  # which of the run's jobs (a successor takes over from its predecessor)


@dataclass(frozen=True)
class Hit:
    """One preemption the drill made: which attempt, which node, and when each phase began.
    ``returned_at`` is when the node was in service again (a replacement after the
    removal, or the same node undrained before it); None: not within the run."""

    moment: str
    attempt: int
    node: str
    drained_at: float
    removed_at: float | None = None
    returned_at: float | None = None


@dataclass
class Observed:
    """One job run as the drill saw it."""

    mode: str  # "slurmpre", "seeds" or "reference"
    job_id: str
    submitted_at: float
    ended_at: float
    state: str
    log: list[dict[str, Any]]
    samples: list[Sample]
    hits: list[Hit]
    ledger: list[dict[str, Any]] = field(default_factory=list)
    # The run's attempt -> (its job, Slurm's restart count there): the ledger's names.
    attempt_ids: dict[int, tuple[str, int]] = field(default_factory=dict)
    jobs: list[str] = field(default_factory=list)  # the run's jobs, first to last
    # The cluster's preemptible nodes, and how many of them the job needs to run: what
    # tells the fleet's capacity from the job's own latency.
    capacity: tuple[str, ...] = ()
    nodes_needed: int = 1
    # Drains of preemptible nodes the run was not on: the fleet's, not the run's preemptions.
    outages: list[Hit] = field(default_factory=list)
    # The capacity scene: the node that came back, and when (`slurmpre.drill.capacity`).
    returned: tuple[str, float] | None = None

    def status(self) -> tuple[JobStatus, list[Record]]:
        """The run as `slurmpre status` tells it, from its ledger, and the ledger's records
        (a line of the wrong shape left out)."""
        from slurmpre.login.status import job_status

        typed = self.records()
        first = self.jobs[0] if self.jobs else self.job_id
        return job_status(first, self.mode, "", typed, None, now=self.ended_at), typed

    def records(self) -> list[Record]:
        """The ledger's records (a line of the wrong shape left out)."""
        from slurmpre.folder import record_shape, records

        typed = []
        for raw in self.ledger:
            try:
                typed.append(records.Record.from_json(raw))
            except record_shape.ShapeError:
                continue
        return typed

    def resizes(self) -> list[Resize]:
        """Each change of the nodes the run trained on (a grow, a shrink, a spare swap or a
        spare lost), as `slurmpre status` tells them, from the run's ledger."""
        return self.status()[0].resizes

    def out_of_service(self, start: float, end: float) -> float:
        """Seconds of [start, end] during which fewer of the cluster's preemptible nodes were
        in service (neither drained nor removed) than the job needs: the fleet's capacity,
        which a restart waits for whoever restarts."""
        drains = [*self.hits, *self.outages]
        nodes = set(self.capacity) or {n for s in self.samples for n in s.nodes} | {
            h.node for h in drains
        }
        # Each drain takes its node out until it returned (or for good).
        edges = sorted(
            [(h.drained_at, -1) for h in drains if h.node in nodes]
            + [(h.returned_at, +1) for h in drains if h.node in nodes and h.returned_at is not None]
        )
        up, since, total = len(nodes), start, 0.0
        for at, change in [*edges, (end, 0)]:
            lo, hi = max(since, start), min(at, end)
            if up < self.nodes_needed and hi > lo:
                total += hi - lo
            up, since = up + change, at
        return total

    def node_seconds(self) -> float:
        """Seconds each node was held, summed over the run's jobs (a successor starting up
        beside its predecessor holds nodes too): each job's samples in which it held
        nodes, each lasting until that job's next sample."""
        total = 0.0
        for job in dict.fromkeys(s.job for s in self.samples):
            mine = [s for s in self.samples if s.job == job]
            for here, nxt in zip(mine, [*mine[1:], None], strict=True):
                until = nxt.t if nxt is not None else self.ended_at
                if here.state in HOLDING_NODES:
                    total += max(until - here.t, 0.0) * len(here.nodes)
        return total

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Observed:
        return cls(
            mode=doc["mode"],
            job_id=doc["job_id"],
            submitted_at=doc["submitted_at"],
            ended_at=doc["ended_at"],
            state=doc["state"],
            log=list(doc["log"]),
            samples=[Sample(**{**s, "nodes": tuple(s["nodes"])}) for s in doc["samples"]],
            hits=[Hit(**h) for h in doc["hits"]],
            ledger=list(doc.get("ledger", [])),
            attempt_ids={int(k): (v[0], int(v[1])) for k, v in doc["attempt_ids"].items()},
            jobs=list(doc.get("jobs", [])),
            capacity=tuple(doc.get("capacity", ())),
            nodes_needed=int(doc.get("nodes_needed", 1)),
            outages=[Hit(**h) for h in doc.get("outages", [])],
            returned=(doc["returned"][0], float(doc["returned"][1]))
            if doc.get("returned")
            else None,
        )


def save(folder: Path, runs: dict[str, Observed], about: dict[str, Any]) -> Path:
    """Write the runs' timelines (and ``about``: seed, options) to ``folder/timelines.json``."""
    path = folder / FILE
    # json writes attempt_ids' int keys as strings and tuples as lists: from_json reads them.
    doc = {"schema": SCHEMA, **about, "runs": {k: asdict(r) for k, r in runs.items()}}
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def load(path: Path) -> tuple[dict[str, Observed], dict[str, Any]]:
    """The runs of a ``timelines.json``, and what else it says about the drill."""
    try:
        doc = json.loads(path.read_text())
        runs = {k: Observed.from_json(r) for k, r in doc.pop("runs").items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UsageError(f"{path} is not a drill's timelines.json: {exc}") from None
    return runs, doc
