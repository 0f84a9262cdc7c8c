"""What a run's timeline page draws, from its ledger (`slurmpre status NAME --html FILE`).

The attempts, their nodes and ends, the resizes and the cost are `slurmpre status`'s
(`login.status`: one owner per fact); this module only places them in time, on a lane
per node (docs/login.md, "The timeline page"). The page itself is `login.page`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import (
    AttemptId,
    AttemptRecord,
    Checkpoint,
    InPlace,
    Notice,
    Placed,
    Pulled,
    Record,
    Saved,
    SpareReleased,
    Start,
    Submitted,
    Successor,
)
from slurmpre.login.handle import Job
from slurmpre.login.page import Bar, Chart, Kind, Lane, Mark, clock
from slurmpre.login.status import AttemptRow, JobStatus, Prices, lines

HANDOVERS = "handovers"
RUN = "run"


class _Lanes:
    """The chart's lanes in the order they are first named: the run's own two, then a
    lane per node."""

    def __init__(self) -> None:
        self.lanes: dict[str, Lane] = {}
        self.used: set[str] = set()

    def node(self, name: str, kind: str) -> str:
        key = f"node:{name}"
        self.lanes.setdefault(key, Lane(key, name, kind))
        return key

    def ordered(self) -> tuple[Lane, ...]:
        own = [Lane(HANDOVERS, "hand-overs"), Lane(RUN, "the run: waits, events")]
        return tuple(lane for lane in own if lane.key in self.used) + tuple(self.lanes.values())


def chart(st: JobStatus, records: Sequence[Record], now: float) -> Chart:
    """The run ``st`` tells, from the ledger's ``records``, up to ``now`` for what runs."""
    jobs = set(st.chain)
    mine = [r for r in records if isinstance(r, AttemptRecord) and r.job in jobs]
    starts = {(r.job, r.attempt_id): r for r in mine if isinstance(r, Start)}
    lanes = _Lanes()
    bars: list[Bar] = []
    marks: list[Mark] = []
    rows = st.attempts
    for i, a in enumerate(rows):
        bars += _attempt_bars(a, rows[i + 1] if i + 1 < len(rows) else None, lanes, now)
    kind_of = {a.job: a.on for a in rows}

    def rank0(r: AttemptRecord) -> str | None:
        start = starts.get((r.job, r.attempt_id))
        return lanes.node(start.nodes[0], kind_of.get(r.job, "")) if start and start.nodes else None

    drained: set[tuple[str, AttemptId, str]] = set()
    for r in mine:
        if (write := _write(r, rank0(r), starts, lanes, kind_of)) is not None:
            bars.append(write)
        if isinstance(r, Notice) and r.kind == "drain" and r.node is not None:
            if (r.job, r.attempt_id, r.node) not in drained:
                drained.add((r.job, r.attempt_id, r.node))
                lane = lanes.node(r.node, kind_of.get(r.job, ""))
                seen = f"; slurmpre saw it {_seen_after(r.seen_at, r.drained_at)}"
                at = r.drained_at if r.drained_at is not None else r.seen_at
                marks.append(Mark(lane, at, Kind.DRAIN, f"{r.describe()} (job {r.job}){seen}"))
        elif isinstance(r, Notice) and r.first and r.kind != "drain":
            marks.append(Mark(RUN, r.seen_at, Kind.NOTICE, f"notice: {r.describe()}"))
        elif isinstance(r, InPlace | SpareReleased):
            why = "in place" if isinstance(r, InPlace) else "a spare that drained"
            for node in r.released:
                lane = lanes.node(node, kind_of.get(r.job, ""))
                marks.append(
                    Mark(
                        lane,
                        r.released_at,
                        Kind.REMOVAL,
                        f"{node} released from job {r.job} ({why})",
                    )
                )
        elif isinstance(r, Placed):
            marks.append(Mark(RUN, r.decided_at, Kind.PLACED, f"next job on {r.where}: {r.why}"))
        elif isinstance(r, Successor) and r.successor in jobs:
            bars.append(_handover(r, rows, now))
    origin = _origin(st, records)
    for z in st.resizes:
        if z.at is not None:
            marks.append(Mark(RUN, z.at, Kind.RESIZE, z.line(clock(z.at - origin))))
    last = rows[-1] if rows else None
    if last is not None and last.ended_at is not None and not st.running:
        marks.append(Mark(RUN, last.ended_at, Kind.END, f"the run's last attempt: {last.ended}"))
    lanes.used |= {b.lane for b in bars} | {m.lane for m in marks}
    text = lines(st)
    return Chart(
        title=f"{st.name}: job {' -> '.join(st.chain)}",
        origin=origin,
        lanes=lanes.ordered(),
        bars=tuple(bars),
        marks=tuple(marks),
        steps=_steps(mine),
        steps_label="steps checkpointed",
        facts=(text[0].strip(), text[-1].strip()),
    )


def _attempt_bars(a: AttemptRow, nxt: AttemptRow | None, lanes: _Lanes, now: float) -> list[Bar]:
    """An attempt's training on its nodes, its spares held, its wait for its predecessor
    (make before break), and the run's wait after it, until the next attempt started."""
    if a.started_at is None:
        return []
    out = []
    end = a.ended_at if a.ended_at is not None else now
    who = f"job {a.job} attempt {a.label}"
    resumed = "from the start" if a.resume_step is None else f"from step {a.resume_step}"
    for node in a.nodes:
        lane = lanes.node(node, a.on)
        if a.up_at is not None and a.up_at < a.started_at:
            out.append(
                Bar(
                    lane,
                    a.up_at,
                    a.started_at,
                    Kind.WAIT,
                    f"job {a.job} waits for job {a.waited_for}",
                    "up beside its predecessor, waiting for its last checkpoint "
                    "(make before break)",
                )
            )
        detail = f"on {', '.join(a.nodes)}; resumed {resumed}; ended: {a.ended}"
        detail += "" if a.lost == "-" else f"; steps lost: {a.lost}"
        out.append(Bar(lane, a.started_at, end, Kind.TRAIN, who, detail))
    for node in a.spares:
        out.append(Bar(lanes.node(node, a.on), a.started_at, end, Kind.HELD, f"{who}: spare"))
    if nxt is None or nxt.started_at is None or a.ended_at is None:
        return out
    if nxt.started_at > a.ended_at:
        waited = f"until job {nxt.job} attempt {nxt.label} started"
        out.append(
            Bar(
                RUN, a.ended_at, nxt.started_at, Kind.WAIT, f"no attempt trains ({a.ended})", waited
            )
        )
    return out


def _write(
    r: AttemptRecord,
    lane: str | None,
    starts: dict[tuple[str, AttemptId], Start],
    lanes: _Lanes,
    kind_of: dict[str, str],
) -> Bar | None:
    """A checkpoint's write, a save on the node and its flush, a pull: a bar on the node
    that did it (rank 0's, or the pulling node)."""
    if r.time is None:
        return None
    if isinstance(r, Pulled):
        start = starts.get((r.job, r.attempt_id))
        if start is None or not 0 <= r.node < len(start.nodes):
            return None
        lane = lanes.node(start.nodes[r.node], kind_of.get(r.job, ""))
        done = "" if r.ok else f" failed: {r.why}"
        took = r.seconds
        kind = Kind.PULL
        label = f"job {r.job} pulled step {r.step}{done}"
        detail = f"{r.bytes} bytes in {r.seconds:.1f} s"
    elif isinstance(r, Saved):
        took = r.seconds
        kind = Kind.SAVE
        label = f"step {r.step} saved on the nodes"
        detail = f"the training stopped {r.seconds:.1f} s"
    elif isinstance(r, Checkpoint) and r.flush_seconds is not None:
        took = r.flush_seconds
        kind = Kind.FLUSH
        label = f"step {r.step} flushed into the folder"
        detail = "beside the training"
    elif isinstance(r, Checkpoint):
        took = r.seconds or 0.0
        why = " on the notice" if r.after_notice else ""
        kind = Kind.CHECKPOINT
        label = f"checkpoint of step {r.step}{why}"
        detail = f"{r.path} ({took:.1f} s)"
    else:
        return None
    return None if lane is None else Bar(lane, r.time - took, r.time, kind, label, detail)


def _handover(r: Successor, rows: Sequence[AttemptRow], now: float) -> Bar:
    """From the successor's submission to its first attempt's start."""
    took_over = next((a.started_at for a in rows if a.job == r.successor and a.started_at), None)
    until = took_over if took_over is not None else now
    why = f"; {r.why}" if r.why else ""
    excluded = f"; not on {', '.join(r.excluded)}" if r.excluded else ""
    return Bar(
        HANDOVERS,
        r.submitted_at,
        until,
        Kind.HANDOVER,
        f"hand-over: job {r.job} -> job {r.successor}",
        f"submitted{why}{excluded}",
    )


def _seen_after(seen: float, drained: float | None) -> str:
    return f"{seen - drained:.1f} s after the drain" if drained is not None else "at once"


def _steps(mine: Sequence[AttemptRecord]) -> tuple[tuple[float, int], ...]:
    """The steps the ledger knows, in time: each attempt's resume, each save, each
    checkpoint written (a flush repeats its save's step, later), each placement's count."""
    points: list[tuple[float, int]] = []
    for r in mine:
        if isinstance(r, Start) and r.time is not None:
            points.append((r.time, r.step or 0))
        elif isinstance(r, Saved | Checkpoint) and r.time is not None:
            if not (isinstance(r, Checkpoint) and r.flush_seconds is not None):
                points.append((r.time, r.step))
        elif isinstance(r, Placed) and r.steps_done is not None:
            points.append((r.decided_at, r.steps_done))
    return tuple(sorted(points))


def _origin(st: JobStatus, records: Sequence[Record]) -> float:
    """The run's submission, else its first start, else now."""
    submitted = [
        r.time
        for r in records
        if isinstance(r, Submitted) and r.job == st.job and r.time is not None
    ]
    started = [a.started_at for a in st.attempts if a.started_at is not None]
    return (submitted or started or [time.time()])[0]


def of_job(job: Job, prices: Prices | None = None) -> Chart:
    """The chart of a job's run (one task of an array), as its status tells it."""
    st = job.status(prices)
    return chart(st, Ledger(job.checkpoint_dir, view=True).records(), time.time())
