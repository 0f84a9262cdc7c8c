"""The drill's capacity scene (#36): preemptible capacity comes back later, and a job asked
for ``nodes = "1-2"`` grows into it. See docs/drill.md ("What it does", 7).
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from pathlib import Path
from typing import Any

from slurmpre.drill import timeline
from slurmpre.drill.driver import Driver, drive, preemptible_nodes
from slurmpre.drill.jobs import drill_spec
from slurmpre.drill.options import DrillOptions
from slurmpre.errors import SlurmpreError
from slurmpre.login.submit import submit
from slurmpre.sandbox.cluster import Sandbox

LOG = logging.getLogger(__name__)


def run_capacity(
    sandbox: Sandbox,
    opts: DrillOptions,
    raw: dict[str, Any],
    work: Path,
    timeout: float,
    jobs: list[str],
) -> timeline.Observed:
    nodes = preemptible_nodes(sandbox)
    away = nodes[-1]
    spec = drill_spec(raw, opts, work / "capacity", name="drill-capacity", nodes="1-2")
    sandbox.client.update_node(away, state="DRAIN", reason="capacity not yet back")
    try:
        started = time.time()
        jobs.append(job := submit(spec, sandbox.client).job_id)
        back_at = max(opts.training_steps() // 5, 1)
        LOG.info(
            f'submitted job {job} (the capacity scene: nodes = "1-2" while {away} is '
            f"drained; it comes back at step {back_at})"
        )
        driver = Driver(
            sandbox, "capacity", job, work / "capacity", [], opts, random.Random(0), started,
            (nodes, 1), returns=(away, back_at),
        )  # fmt: skip
        (run,) = drive([driver], timeout)
    finally:
        with contextlib.suppress(SlurmpreError):
            if sandbox.client.nodes([away])[0].draining:  # an idle node's RESUME is refused
                sandbox.client.update_node(away, state="RESUME")
    return run


def lines(run: timeline.Observed) -> list[str]:
    """The scene in the report: when the node came back, and each resize after it."""
    t0 = run.submitted_at
    out = ["", f"capacity scene (job {run.job_id}): {run.state}"]
    if run.returned is not None:
        node, at = run.returned
        out.append(f"  {node} back in service at +{at - t0:.1f}s")
    resizes = run.resizes()  # read from the whole ledger: once
    for r in resizes:
        when = "-" if r.at is None else f"+{r.at - t0:.1f}s"
        after = ""
        if run.returned is not None and r.at is not None and r.kind == "grow":
            after = f", {r.at - run.returned[1]:.1f} s after the node came back"
        out.append(f"  {r.line(when)}{after}")
    if not resizes:
        out.append("  no resize: the job did not grow back")
    return out
