"""The drill's side-by-side page: ``timeline.html`` in the run's folder.

A run with a ledger is drawn as `slurmpre status --html` draws it (`login.story`); the
seeds' recipe keeps none, so its attempts are the report's (`drill.report`). Drains and
removals are always the drill's own (it made them).
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

from slurmpre.drill import report
from slurmpre.drill.options import DrillResult
from slurmpre.drill.timeline import Observed
from slurmpre.login import page, story
from slurmpre.login.page import Bar, Chart, Kind, Lane, Mark
from slurmpre.slurm import states

FILE = "timeline.html"
SIDES = (
    ("slurmpre", "slurmpre"),
    ("seeds", "the seeds' recipe (--requeue, a checkpoint every N steps)"),
    ("reference", "uninterrupted reference (standard node)"),
)


def render(result: DrillResult) -> str:
    ref = result.runs.get("reference")
    charts = [
        _chart(run, title, report.summarize(run, ref, prices=result.options.prices))
        for mode, title in SIDES
        if (run := result.runs.get(mode)) is not None
    ]
    slurm = f", Slurm {result.slurm}" if result.slurm else ""
    notes = (
        f"seed {result.seed}, {result.timings} timings{slurm}; "
        f"{len(result.schedule)} preemptions, each a drain and, {result.options.window:g} s "
        "later, the node's removal",
    )
    return page.render("slurmpre drill: each run from its submission", charts, notes)


def write(result: DrillResult) -> Path:
    """The page, at ``timeline.html`` beside the run's ``timelines.json``."""
    path = result.workdir / FILE
    page.write(path, render(result))
    return path


def _chart(run: Observed, title: str, summary: report.Summary) -> Chart:
    base = story.chart(*run.status(), run.ended_at) if run.ledger else _from_samples(run)
    lanes = {lane.key: lane for lane in base.lanes}
    if run.mode == "reference":  # the ledger does not say where it ran: the drill does
        lanes = {
            k: dataclasses.replace(v, kind="standard") if v.kind else v for k, v in lanes.items()
        }
    marks = [m for m in base.marks if m.kind != Kind.DRAIN]  # the drill's own, below
    for hit in run.hits:
        key = f"node:{hit.node}"
        lanes.setdefault(key, Lane(key, hit.node, _kind(run, hit.node)))
        marks.append(Mark(key, hit.drained_at, Kind.DRAIN, f"{hit.node} drained ({hit.moment})"))
        if hit.removed_at is not None:
            marks.append(Mark(key, hit.removed_at, Kind.REMOVAL, f"{hit.node} removed"))
    steps = tuple((float(e["t"]), int(e["step"])) for e in run.log if e.get("event") == "step")
    lost = "unknown" if summary.steps_lost is None else str(summary.steps_lost)
    facts = (
        f"job {' -> '.join(run.jobs or [run.job_id])}: {run.state}; {summary.attempts} "
        f"attempt(s), {summary.preemptions} preemption(s), {lost} steps lost",
        f"wall {summary.wall_s:.0f} s; {summary.node_seconds / 3600:.3f} node-hours: "
        f"${summary.cost_preemptible:.3f} on preemptible nodes"
        if run.mode != "reference"
        else f"wall {summary.wall_s:.0f} s: the pace without preemptions",
    )
    return dataclasses.replace(
        base,
        title=title,
        origin=run.submitted_at,
        lanes=tuple(lanes.values()),
        marks=tuple(marks),
        steps=steps or base.steps,
        steps_label="steps trained",
        facts=facts,
    )


def _from_samples(run: Observed) -> Chart:
    """Each attempt as Slurm showed it running, its checkpoint writes from the training's
    log, and the run's waits between attempts (a requeue waits out its floor)."""
    bars: list[Bar] = []
    lanes: dict[str, Lane] = {}
    rows = report.attempts(run)
    ends: list[tuple[float, float]] = []
    for a in rows:
        running = [
            s.t for s in run.samples if s.restarts == a.attempt and s.state == states.RUNNING
        ]
        times = [t for t in (a.started_at, a.last_step_at, a.done_at, *running) if t is not None]
        if not times or a.started_at is None:
            continue
        end = max(times)
        ends.append((a.started_at, end))
        for node in a.nodes:
            key = f"node:{node}"
            lanes.setdefault(key, Lane(key, node, _kind(run, node)))
            bars.append(
                Bar(
                    key,
                    a.started_at,
                    end,
                    Kind.TRAIN,
                    f"job {a.job} attempt {a.attempt}",
                    f"resumed from step {a.resumed_step}; {a.ended}",
                )
            )
        saves = [e for e in run.log if e.get("attempt") == a.attempt]
        begun = {e["step"]: e["t"] for e in saves if e.get("event") == "save-start"}
        for e in saves:
            if e.get("event") == "save-end" and e["step"] in begun and a.nodes:
                bars.append(
                    Bar(
                        f"node:{a.nodes[0]}",
                        begun[e["step"]],
                        e["t"],
                        Kind.CHECKPOINT,
                        f"checkpoint of step {e['step']}",
                        str(e.get("why", "")),
                    )
                )
    for (_, end), (start, _) in itertools.pairwise(ends):
        if start > end:
            bars.append(Bar(story.RUN, end, start, Kind.WAIT, "no attempt runs (requeue)"))
    own = (
        [Lane(story.RUN, "the run: waits, events")]
        if any(b.lane == story.RUN for b in bars)
        else []
    )
    return Chart(
        title=run.mode, origin=run.submitted_at, lanes=(*own, *lanes.values()), bars=tuple(bars)
    )


def _kind(run: Observed, node: str) -> str:
    if run.mode == "reference":
        return "standard"
    return "" if not run.capacity else "preemptible" if node in run.capacity else "standard"
