"""What an earlier attempt of the job left in a node's local folder, taken over by the
attempt that starts there next: a step restarted in place on the nodes it kept, or a
job requeued after a node was lost without notice and started again on nodes it held.

At its start each node's wrapper moves (one rename each, nothing copied) the newest step
newer than the checkpoint folder's that an earlier attempt of the same job left on the
node: a whole copy (pulled in place before a drained node went, or a one-node save), or
the parts it held, its own and its neighbour's (`slurmpre.tier.replica`); parts that
make the whole step are merged into one whole copy. It records what it took (`Adopted`).
Node 0 then resumes from that step when every node holds it whole, or when the nodes
hold every part between them, after each has pulled the parts it lacks from the others
(`gather`); else from the folder, as without the tier.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from slurmpre.folder.layout import file_tag, step_dir_name
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import Adopted, AttemptId, Serving
from slurmpre.tier import local, replica

HELD = "held-"  # a part taken over that is not the whole step: served under this name


def held_name(step: int, node: int) -> str:
    return f"{HELD}{step_dir_name(step)}-{node}"


@dataclass(frozen=True)
class Taken:
    """What a node took over: ``step``, saved by ``nodes`` nodes, whole (``parts`` None,
    in ``step-N``) or the parts of those nodes (in ``held-step-N-<node>``)."""

    step: int
    nodes: int | None
    parts: tuple[int, ...] | None
    source: str


def adopt(run: Path, job: str, newer_than: int) -> Taken | None:
    """Take over into ``run`` the newest step newer than ``newer_than`` that earlier attempts
    or steps of ``job`` left beside it on this node (see the module); None: nothing."""
    mine = file_tag(f"{job}-")
    found: list[tuple[local.Part, str]] = []
    with contextlib.suppress(OSError), os.scandir(run.parent) as entries:
        for entry in entries:
            if entry.name == run.name or not entry.name.startswith(mine):
                continue
            if entry.is_dir(follow_symlinks=False):
                earlier = Path(entry.path)
                for part in [*local.parts(earlier), *replica.replicas(earlier)]:
                    if part.step > newer_than:
                        found.append((part, entry.name))
    if not found:
        return None
    step = max(part.step for part, _ in found)
    here = [(part, name) for part, name in found if part.step == step]
    for part, name in here:
        if part.whole:
            return _whole(run, [part], step, part.meta.get("nodes"), name)
    by_node: dict[int, local.Part] = {}
    nodes = None
    for part, _ in here:
        node, of = part.meta.get("node"), part.meta.get("nodes")
        if isinstance(node, int) and isinstance(of, int) and nodes in (None, of):
            nodes = of
            by_node.setdefault(node, part)
    source = here[0][1]
    if nodes is None:
        return None
    if set(by_node) == set(range(nodes)):
        return _whole(run, list(by_node.values()), step, nodes, source)
    try:
        for node, part in by_node.items():
            part.path.rename(run / held_name(step, node))
    except OSError:
        return None
    return Taken(step, nodes, tuple(sorted(by_node)), source)


def _whole(
    run: Path, parts: list[local.Part], step: int, nodes: object, source: str
) -> Taken | None:
    """``parts`` (one whole copy, or every node's part) as the whole copy ``run/step-N``."""
    merged = run / f".merging-{step_dir_name(step)}-{os.getpid()}"
    try:
        if len(parts) == 1:
            parts[0].path.rename(run / step_dir_name(step))
        else:
            merged.mkdir(mode=0o700)
            for part in parts:
                for rel in part.files:
                    target = merged / rel
                    if not target.exists():
                        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                        (part.path / rel).rename(target)
            meta = {**parts[0].meta, "whole": True, "node": None}
            local.seal(merged, run, step, meta)
    except OSError:
        return None
    finally:
        shutil.rmtree(merged, ignore_errors=True)
    return Taken(step, nodes if isinstance(nodes, int) else None, None, source)


def gather(
    ledger: Ledger,
    job: str,
    at: AttemptId,
    names: Sequence[str],
    durable: int | None,
    say: Callable[[str], None],
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
    taken = [r for r in records if isinstance(r, Adopted) and r.job == job and r.attempt_id == at]
    if not taken:
        return None  # no node holds anything newer than the folder
    step = max(r.step for r in taken)
    if durable is not None and step <= durable:
        return None
    serving = {r.node: f"{r.host}:{r.port}" for r in records if isinstance(r, Serving)
               and r.job == job and r.attempt_id == at}  # fmt: skip
    where_is = {i: serving.get(name) for i, name in enumerate(names)}
    holders = [r for r in taken if r.step == step]
    whole = [r.node for r in holders if r.parts is None]
    if len(whole) == nodes:
        return step
    copy: str | None = None  # where a whole copy is served
    parts: dict[int, str] = {}  # where each node's part is
    for r in holders:
        where = where_is.get(r.node)
        if where is not None and r.parts is None:
            copy = copy or f"{where}/{step_dir_name(step)}"
        elif where is not None and r.parts is not None:
            for part in r.parts:
                parts.setdefault(part, f"{where}/{held_name(step, part)}")
    saved_by = next((r.nodes for r in holders if r.nodes), None)
    if copy is None and (saved_by is None or set(parts) != set(range(saved_by))):
        say(f"the nodes of this attempt hold only some parts of step {step}: resuming "
            "from the checkpoint folder")  # fmt: skip
        return None
    picked = [copy] if copy is not None else [parts[i] for i in sorted(parts)]
    pullers = tuple(i for i in range(nodes) if i not in whole)
    ok = handoff.ask_pulls(ledger, job=job, at=at, predecessor=job, step=step,
                           sources=picked, pullers=pullers, say=say)  # fmt: skip
    return step if ok else None
