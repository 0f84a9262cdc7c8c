"""What an earlier attempt of the job left in a node's local folder, taken over by the
attempt that starts there next: a step restarted in place on the nodes it kept, or a
job requeued after a node was lost without notice and started again on nodes it held
(docs/local-tier.md, 4 and 5). Each node takes it over with renames, nothing copied
(`adopt`); node 0 then has the nodes pull among them the parts each lacks (`gather`).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from slurmpre.folder.layout import file_tag, step_dir_name
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import Adopted, AttemptId
from slurmpre.tier import local, replica
from slurmpre.tier import serving as where

LOG = logging.getLogger(__name__)

HELD = "held-"  # a part taken over that is not the whole step: served under this name


def held_name(step: int, node: int) -> str:
    return f"{HELD}{step_dir_name(step)}-{node}"


@dataclass(frozen=True)
class Taken:
    """What a node took over of one step: saved by ``nodes`` nodes in the save ``save``
    (job.attempt.in_place), whole (``parts`` None, in ``step-N``) or the parts of those
    nodes (in ``held-step-N-<node>``)."""

    step: int
    nodes: int | None
    parts: tuple[int, ...] | None
    source: str
    save: str | None = None


def save_of(part: local.Part) -> str:
    """Which save a part belongs to: two attempts may each have saved a step of that number."""
    meta = part.meta
    return f"{meta.get('job')}.{meta.get('attempt', 0)}.{meta.get('in_place', 0)}"


LOCKED_WAIT = 30.0  # seconds a step that just ended is given to let its folder go


def adopt(run: Path, job: str, newer_than: int) -> list[Taken]:
    """Take over into ``run`` every step newer than ``newer_than`` that earlier attempts or
    steps of ``job`` left beside it on this node (see the module), newest first. Of two
    saves of one step number the later attempt's is taken; parts of different saves are
    never merged. A folder whose wrapper still lives is waited for a little, then left."""
    mine = file_tag(f"{job}-")
    found: dict[tuple[int, str], list[tuple[local.Part, str]]] = {}
    with contextlib.suppress(OSError), os.scandir(run.parent) as entries:
        earlier = [Path(e.path) for e in entries if e.name != run.name
                   and e.name.startswith(mine) and e.is_dir(follow_symlinks=False)]  # fmt: skip
    for folder in earlier:
        if not _let_go(folder):
            continue
        for part in [*local.parts(folder), *replica.replicas(folder)]:
            if part.step > newer_than:
                found.setdefault((part.step, save_of(part)), []).append((part, folder.name))
    taken = []
    for step in sorted({step for step, _ in found}, reverse=True):
        save = max((s for st, s in found if st == step), key=_order)
        got = _take(run, step, save, found[(step, save)])
        if got is not None:
            taken.append(got)
    return taken


def _order(save: str) -> tuple[int, int]:
    _, attempt, in_place = save.rsplit(".", 2)
    return (int(attempt), int(in_place)) if attempt.isdigit() and in_place.isdigit() else (-1, -1)


def _let_go(folder: Path) -> bool:
    """Whether the wrapper that held ``folder`` has let it go (within LOCKED_WAIT)."""
    try:
        fd = os.open(folder / local.LOCK, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return True
    try:
        deadline = time.monotonic() + LOCKED_WAIT
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                return True
            except OSError:
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.2)
    finally:
        os.close(fd)


def _take(run: Path, step: int, save: str, here: list[tuple[local.Part, str]]) -> Taken | None:
    source = here[0][1]
    for part, name in here:
        if part.whole:
            try:
                part.path.rename(run / step_dir_name(step))
            except OSError:
                return None
            return Taken(step, _int(part.meta.get("nodes")), None, name, save)
    by_node: dict[int, local.Part] = {}
    nodes = None
    for part, _ in here:
        node, of = part.meta.get("node"), part.meta.get("nodes")
        if isinstance(node, int) and isinstance(of, int) and nodes in (None, of):
            nodes = of
            by_node.setdefault(node, part)
    if nodes is None:
        return None
    if set(by_node) == set(range(nodes)) and _merge(run, list(by_node.values()), step):
        return Taken(step, nodes, None, source, save)
    try:
        for node, part in by_node.items():
            part.path.rename(run / held_name(step, node))
    except OSError:
        return None
    return Taken(step, nodes, tuple(sorted(by_node)), source, save)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) else None


def _merge(run: Path, parts: list[local.Part], step: int) -> bool:
    """Every node's part of ``step`` as one whole copy ``run/step-N``, made of hard links:
    the parts are removed only once it is sealed (a failure leaves them as they were)."""
    merged = run / f".merging-{step_dir_name(step)}-{os.getpid()}"
    try:
        merged.mkdir(mode=0o700)
        for part in parts:
            for rel in part.files:
                target = merged / rel
                if not target.exists():
                    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                    os.link(part.path / rel, target, follow_symlinks=False)
        local.seal(merged, run, step, {**parts[0].meta, "whole": True, "node": None})
    except OSError:
        shutil.rmtree(merged, ignore_errors=True)
        return False
    for part in parts:
        shutil.rmtree(part.path, ignore_errors=True)
    return True


def gather(
    ledger: Ledger,
    job: str,
    at: AttemptId,
    names: Sequence[str],
    durable: int | None,
) -> int | None:
    """Node 0 of a restarted attempt: the step its nodes resume from, taken over on them
    (`Adopted`), newer than the folder's newest (``durable``): at once when every node
    holds it whole; after every other node has pulled it from those that hold its parts
    when they hold them all between them; else None (the folder). Asked once every node's
    tier is up (each records what it took before it serves)."""
    from slurmpre.tier import handoff  # sockets and HMAC: only once it is asked

    nodes = len(names)
    if not handoff.all_serve(ledger, job, at, nodes):
        return None
    records = ledger.records()
    taken = [r for r in records if isinstance(r, Adopted) and r.job == job and r.attempt_id == at
             and (durable is None or r.step > durable)]  # fmt: skip
    serving = where.serving(records, job, at)
    where_is = {i: serving.get(name) for i, name in enumerate(names)}
    held_by = {(r.step, r.save): sum(x.step == r.step and x.save == r.save for x in taken)
               for r in taken}  # fmt: skip
    for step, save in sorted(held_by, key=lambda k: (k[0], held_by[k]), reverse=True):
        holders = [r for r in taken if r.step == step and r.save == save]
        whole = [r.node for r in holders if r.parts is None]
        if len(set(whole)) == nodes:
            return step
        copy: str | None = None  # where a whole copy is served
        parts: dict[int, str] = {}  # where each node's part is
        for r in holders:
            address = where_is.get(r.node)
            if address is not None and r.parts is None:
                copy = copy or f"{address}/{step_dir_name(step)}"
            elif address is not None and r.parts is not None:
                for part in r.parts:
                    parts.setdefault(part, f"{address}/{held_name(step, part)}")
        saved_by = next((r.nodes for r in holders if r.nodes), None)
        if copy is None and (saved_by is None or set(parts) != set(range(saved_by))):
            continue  # some part of it is on no node of this attempt: an older one?
        picked = [copy] if copy is not None else [parts[i] for i in sorted(parts)]
        pullers = tuple(i for i in range(nodes) if i not in whole)
        ok = handoff.ask_pulls(ledger, job=job, at=at, predecessor=job, step=step,
                               sources=picked, pullers=pullers)  # fmt: skip
        return step if ok else None
    if taken:
        newest = max(r.step for r in taken)
        LOG.info(
            f"the nodes of this attempt hold only some parts of step {newest}"
            ": resuming from the checkpoint folder"
        )
    return None
