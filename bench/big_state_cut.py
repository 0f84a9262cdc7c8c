"""bench/big_state.py's scene ``1 node, pull cut midway`` (#51): one node with the tier,
drained; as soon as the successor's pull of the notice save has begun (bytes of it in a
node-local folder, looked for every 20 ms), the drained node is removed the provider's
way (`remove_node`), so the pull is cut. The successor must resume from the newest
checkpoint the folder holds (never a partial copy) and one line must say so.

`cut` plays the timeline; `judge` reads what came of it (the ledger, the job's output,
`slurmpre status`). A pull that ended before the removal leaves the scene inconclusive:
neither a pass nor a failure.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import Checkpoint, PullAsked, PullDone, Pulled, Start
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.sandbox.preempt import keep_down, remove_node, restore_node

LOOK = 0.02  # seconds between looks for the pull's first bytes
# A pull's files land in ``<run>/.pulling-.pulled-<step>-<i>-<pid>/`` (`handoff.pull_all`,
# then `transfer.pull`), ``<run>`` four levels below the node's local folder (`local.run_dir`).
PULLING = "*/*/*/*/.pulling-.pulled-*"
# The line node 0 of the successor says when a pull fails (`handoff.ask_pulls`).
SAYS = re.compile(r"pulling step \d+ from .* failed \(.*\): resuming from the newest checkpoint")


def pulling_bytes(box: Sandbox, besides: str) -> int:
    """The bytes of a pull under way in the local folders of every node but ``besides``."""
    cfg, total = box.config(), 0
    for node in cfg.nodes:
        if node.name == besides:
            continue
        for temp in cfg.local_dir(node.name).glob(PULLING):
            for root, _, names in os.walk(temp):
                for name in names:
                    with contextlib.suppress(OSError):  # the pull's end removed it
                        total += os.lstat(os.path.join(root, name)).st_size
    return total


def cut(
    box: Sandbox, victim: str, window: float, back_after: float, say: Callable[[str], None]
) -> dict[str, Any]:
    """Drain ``victim``; remove it once a pull of its save has bytes on the successor's node
    (at the window's end at the latest, as the provider would), mark it DOWN, and bring it
    back ``back_after`` s later. When it drained, and what the pull held at the removal."""
    box.client.update_node(victim, state="DRAIN", reason="preempted")
    drained = time.time()
    say(f"drain {victim}; waiting for the successor's pull to begin")
    got = 0
    while time.time() < drained + window and not (got := pulling_bytes(box, victim)):
        time.sleep(LOOK)
    seen = time.time()
    killed = remove_node(box, victim)
    removed = time.time()
    box.client.update_node(victim, state="DOWN", reason="preempted: node removed")
    say(f"remove {victim} at drain +{removed - drained:.2f} s ({removed - seen:.2f} s after "
        f"{got / 1e6:.1f} MB of the pull were seen): {killed} job process(es) killed")  # fmt: skip
    keep_down(box, victim, "preempted: node removed")
    time.sleep(max(0.0, removed + back_after - time.time()))
    restore_node(box, victim)
    return {"drained": drained, "removed": removed, "seen_mb": got / 1e6}


def judge(
    folder: Path, jobs: list[str], cut_at: dict[str, Any], env: dict[str, str]
) -> dict[str, Any]:
    """What the successor did after the cut: the pull's outcome, the checkpoint it resumed
    from against the newest durable one then, and the lines that said so."""
    records = Ledger(folder).records()
    successor = jobs[1] if len(jobs) > 1 else None
    done = [r for r in records if isinstance(r, PullDone) and r.job == successor]
    asked = [r for r in records if isinstance(r, PullAsked) and r.job == successor]
    pulled = [r for r in records if isinstance(r, Pulled) and r.job == successor]
    start = next((r for r in records if isinstance(r, Start) and r.job == successor), None)
    out: dict[str, Any] = {"seen_mb": cut_at["seen_mb"], "pull_why": None}
    if not done or not asked:
        out["cut"] = "inconclusive: no pull was asked" if not asked else "no PullDone recorded"
    elif done[-1].ok:
        out["cut"] = "inconclusive: the pull finished first"
    else:
        out["pull_why"] = done[-1].why
        midway = (asked[-1].time or 0) < cut_at["removed"] and cut_at["seen_mb"] > 0
        out["cut"] = "midway" if midway else "failed, not midway"
    out["pullers_failed"] = sum(not r.ok for r in pulled)
    # The newest checkpoint committed in the folder before the successor chose.
    durable = [r for r in records if isinstance(r, Checkpoint)
               and start is not None and (r.time or 0) < (start.time or 0)]  # fmt: skip
    newest = max(durable, key=lambda r: r.step, default=None)
    out["durable_step"] = None if newest is None else newest.step
    out["resumed_from"] = None if start is None else start.resume_from
    out["chosen_step"] = None if start is None else start.step
    out["newest"] = (
        start is not None
        and newest is not None
        and start.step == newest.step
        and Path(start.resume_from or "") == Path(newest.path)
    )
    # Nothing partial: the path chosen is a committed `step-N` of the folder, no hidden
    # or in-flight name, and the ledger says it was committed before the choice.
    name = Path(out["resumed_from"] or "").name
    out["partial"] = not (re.fullmatch(r"step-\d+", name) and out["newest"])
    lines = []  # the jobs' output (Slurm's, across attempts; each attempt's copy left out)
    for log in sorted((folder / "logs").glob("*.out")):
        if ".attempt-" not in log.name:
            text = log.read_text(errors="replace")
            lines += [ln.strip() for ln in text.splitlines() if "pull" in ln]
    out["says"] = [ln for ln in lines if SAYS.search(ln)]
    out["pull_lines"] = [ln for ln in lines if "fail" in ln]
    if successor is not None:
        argv = [sys.executable, "-m", "slurmpre", "status", successor, "--checkpoint-dir",
                str(folder)]  # fmt: skip
        shown = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env).stdout
        # its attempts' table: the header and a row each (the step it resumed from)
        out["status"] = [ln.rstrip() for ln in shown.splitlines()
                         if re.match(r"\s+(#|\d+) ", ln)]  # fmt: skip
    return out


def passed(r: dict[str, Any]) -> bool | None:
    """The scene's own checks: None when inconclusive (the pull ended before the cut)."""
    if r["cut"].startswith("inconclusive"):
        return None
    return (
        r["cut"] == "midway"
        and r["newest"]
        and not r["partial"]
        and len(r["says"]) == 1
        and r["chosen_step"] == r["resumed_step"]  # the ledger's choice, the training's load
        and r["twice"] == r["last_before"] - r["resumed_step"]
    )


def report(r: dict[str, Any]) -> list[str]:
    """The scene's lines for the tables."""
    return [
        f"the pull: {r['cut']} ({r['seen_mb']:.1f} MB of it seen on the successor's node "
        f"before the removal; node 0 recorded: {r['pull_why']})",
        f"resumed from {r['resumed_from']} (step {r['chosen_step']}); the newest durable "
        f"checkpoint in the folder then: step {r['durable_step']} "
        f"({'the same' if r['newest'] else 'NOT the same'}); partial chosen: "
        f"{'YES' if r['partial'] else 'no'}",
        f"lines that say the pull failed and the folder is used: {len(r['says'])}; lines "
        f"that say a pull failed: {len(r['pull_lines'])}",
        *(f"| {ln}" for ln in r["pull_lines"]),
        *(f"slurmpre status: {ln.strip()}" for ln in r.get("status", [])),
    ]
