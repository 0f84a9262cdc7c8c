"""Restarting inside the allocation: when a drain can be answered without a requeue
(`plan`), and the watcher's `Request` to the batch script's supervisor
(`slurmpre.job.handover.steps`), written beside the ledger. See docs/how-it-works.md
("Fast restart, in place", "Hot spares").
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from slurmpre.folder import trust
from slurmpre.folder.access import CONTROL_MODE
from slurmpre.reading import SMALL


@dataclass(frozen=True)
class Plan:
    keep: tuple[str, ...] | None  # the nodes the next step runs on; None: requeue
    why: str
    spares_in: tuple[str, ...] = ()  # spares among ``keep``: they take drained nodes' places


def plan(
    *,
    kind: str,
    nodes: Sequence[str],
    drained: Collection[str],
    batch_host: str | None,
    min_nodes: int,
    enabled: bool = True,
    spares: Sequence[str] = (),
) -> Plan:
    """In place when the job loses only nodes other than the batch host and keeps at
    least ``min_nodes``, a spare taking each drained node's place while one is left; a
    requeue otherwise, with the reason."""
    if not enabled:
        return Plan(None, "in-place restarts are off (in_place = false)")
    if batch_host is None:
        return Plan(
            None,
            "the batch script runs no supervisor of steps (a fixed node count, or a "
            "template of its own)",
        )
    if kind != "drain":
        return Plan(None, f"a {kind} notice ends the whole allocation")
    if batch_host in drained:
        return Plan(None, f"the batch host {batch_host} drained")
    keep = tuple(n for n in nodes if n not in drained)
    ready = [s for s in spares if s not in drained and s not in nodes]
    spares_in = tuple(ready[: len(nodes) - len(keep)])
    keep += spares_in
    if len(keep) < max(min_nodes, 1):
        return Plan(None, f"{len(keep)} node(s) would remain, fewer than the minimum {min_nodes}")
    gone = ", ".join(n for n in nodes if n in drained)
    if not gone:
        return Plan(None, "no training node drained")
    instead = f"; spare {', '.join(spares_in)} takes its place" if spares_in else ""
    return Plan(keep, f"{gone} drained{instead}; {len(keep)} node(s) train", spares_in)


@dataclass(frozen=True)
class Request:
    """The watcher's ask to the batch script's supervisor. With nothing to ``keep``: end
    the step and start none (the job hands over to another, whose training waits for
    this one's end: a rank that hangs or dies in its teardown would keep the step, and so
    the job, for Slurm's KillWait)."""

    keep: tuple[str, ...]
    release: tuple[str, ...]
    why: str
    at: float  # wall clock
    spares_in: tuple[str, ...] = ()
    # Start the next step now, beside this one, which trains on until it waits
    # (`handover.overlap`); a request without it that follows ends this step.
    early: bool = False


def write_spares(path: Path, drained: Collection[str]) -> None:
    """Every spare of the attempt that drained so far: the supervisor releases those the job
    still holds, while the step goes on."""
    trust.write(path, json.dumps({"release": sorted(drained)}), mode=CONTROL_MODE)


def _read(path: Path) -> Any:
    """The JSON in ``path``; None when there is none, it cannot be read whole, or it is not
    the user's own (`slurmpre.folder.trust`: said once)."""
    try:
        return json.loads(trust.read_text(path, SMALL))
    except trust.Untrusted as exc:
        trust.refused(exc)
    except (OSError, ValueError):
        pass
    return None


def read_spares(path: Path) -> tuple[str, ...]:
    """The drained spares asked to be released (none: see `_read`)."""
    data = _read(path)
    release = data.get("release") if isinstance(data, dict) else None
    if not isinstance(release, list) or not all(isinstance(n, str) for n in release):
        return ()
    return tuple(release)


def write_request(path: Path, request: Request) -> None:
    trust.write(path, json.dumps(asdict(request), sort_keys=True), mode=CONTROL_MODE)


def read_request(path: Path) -> Request | None:
    """The request, or None (see `_read`)."""
    data = _read(path)
    try:
        keep = tuple(str(n) for n in data["keep"])
        release = tuple(str(n) for n in data["release"])
        spares_in = tuple(str(n) for n in data.get("spares_in", ()))
        early = data.get("early", False) is True
        return Request(keep, release, str(data["why"]), float(data["at"]), spares_in, early)
    except (OSError, ValueError, TypeError, KeyError):
        return None
