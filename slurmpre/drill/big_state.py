"""The drill's big-state scene (#51): a state too big to write within the window, saved on
the node, its checkpoint folder on a shared dir capped so that a save there takes one and
a half windows. See docs/drill.md ("What it does", 8) for the scene and what it must show.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import stat
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from slurmpre.drill import report, timeline
from slurmpre.drill.driver import Driver, drive
from slurmpre.drill.jobs import drill_spec
from slurmpre.drill.options import BIG_STATE, DrillOptions
from slurmpre.drill.plan import Moment
from slurmpre.errors import UsageError
from slurmpre.folder import records
from slurmpre.login.submit import submit
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.sandbox.instance import STATE_ROOT

LOG = logging.getLogger(__name__)

NAME = BIG_STATE
EVERY = 100  # steps between periodic saves, at most (the drill's interval, if shorter)
# + sandbox<N>: the capped shared dir (beside the sandboxes' state, never inside it)
SHARED = STATE_ROOT.with_name(f"{STATE_ROOT.name}-drill")


def shared_dir(sandbox: Sandbox) -> Path:
    """Where the sandbox mounts the scene's shared dir: in a folder of this user's alone
    (made 0700 here), since the scene's job resumes from what lies there; refused when it
    is a link, another user's, or others may write it."""
    with contextlib.suppress(FileExistsError):
        SHARED.mkdir(mode=0o700, parents=True)
    st = os.lstat(SHARED)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise UsageError(
            f"{SHARED}: not a folder of this user's alone (a link, another user's, or "
            "writable by others); remove it and run the drill again"
        )
    return SHARED / f"sandbox{sandbox.instance.number}"


def scene_options(opts: DrillOptions) -> DrillOptions:
    """Four periodic intervals of training, saves that take what they take."""
    every = min(opts.every, EVERY)
    return replace(opts, steps=4 * every, every=every, save_seconds=0.0, preemptions=1)


def run_big_state(
    sandbox: Sandbox,
    opts: DrillOptions,
    raw: dict[str, Any],
    work: Path,
    timeout: float,
    jobs: list[str],
) -> tuple[timeline.Observed, Path]:
    """The scene's run, and its checkpoint folder (on the capped shared dir)."""
    scene = scene_options(opts)
    folder = shared_dir(sandbox) / work.name / NAME
    spec = drill_spec(
        raw, scene, folder, name=f"drill-{NAME}", nodes="1", local_dir="auto",
        args=("--state-mb", str(opts.big_state_mb)),
    )  # fmt: skip
    started = time.time()
    jobs.append(job := submit(spec, sandbox.client).job_id)
    LOG.info(
        f"submitted job {job} (the big-state scene: {opts.big_state_mb} MB of state, its "
        f"folder {folder} on a shared dir capped at {opts.big_state_mbps():.3g} MB/s)"
    )
    drain = Moment("training", 2 * scene.every + 5)  # just after its second periodic save
    driver = Driver(sandbox, NAME, job, folder, [drain], scene, random.Random(0), started)
    (run,) = drive([driver], timeout + scene.training_steps() * opts.step_seconds + 4 * opts.window)
    return run, folder


def lines(run: timeline.Observed, opts: DrillOptions) -> list[str]:
    """The scene in the report: the stalls of its saves on the node, its preemption with
    the save, pull and flush, and each checkpoint's flush into the folder."""
    typed = run.records()
    saved = [r for r in typed if isinstance(r, records.Saved)]
    flushed = [r for r in typed if isinstance(r, records.Checkpoint) and r.flush_seconds]
    out = [
        "",
        f"big-state scene (job {run.job_id}; {opts.big_state_mb} MB of state saved on the node, "
        f"its folder capped at {opts.big_state_mbps():.3g} MB/s): {run.state}",
    ]
    periodic = [r.seconds for r in saved if not r.after_notice]
    if periodic:
        out.append(
            f"  {len(periodic)} periodic save(s) on the node stopped the training "
            f"{max(periodic):.2f} s at most; in the folder a save takes about "
            f"{opts.big_state_mb / opts.big_state_mbps():.0f} s"
        )
    for p in report.preemptions(run):
        lost = "-" if p.steps_lost is None else str(p.steps_lost)
        step = "-" if p.drain_to_first_step_s is None else f"{p.drain_to_first_step_s:.1f} s"
        tier = p.tier_line() or "saved straight into the folder"
        out.append(
            f"  drain of {p.node} at +{p.drained_at - run.submitted_at:.1f}s: step "
            f"{p.checkpoint_step} {tier}; training again {step} after the drain, "
            f"{lost} steps lost"
        )
    for r in flushed:
        out.append(f"  step {r.step} flushed into the folder in {r.flush_seconds:.1f} s")
    return out
