"""The drain board's files (`drainboard`): the board's shape, written by the holder and
read by every job of the user, and how any of its files is read: a regular file of this
user that nobody else may write, else it is ignored."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from slurmpre.reading import SMALL, read_regular
from slurmpre.slurm.parse import NodeInfo

VERSION = 1
BOARD_MAX_BYTES = 1 << 22  # a board of some thousands of nodes


def number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _strings(value: object) -> TypeGuard[list[str]]:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


@dataclass(frozen=True)
class Board:
    polled_at: float  # wall clock, when the holder's query answered
    by: str  # the job that polled
    asked: frozenset[str]  # every node it asked about
    nodes: Mapping[str, NodeInfo]  # those Slurm knew (a node removed is not among them)
    everything: bool = False  # it asked about every node of the cluster


def _node_json(n: NodeInfo) -> dict[str, Any]:
    return {
        "name": n.name,
        "state": n.state,
        "flags": sorted(n.flags),
        "reason": n.reason,
        "reason_time": n.reason_time,
        "features": list(n.features),
    }


def _node_of(d: Any) -> NodeInfo:
    if not isinstance(d, dict):
        raise ValueError("not a node")
    name = d.get("name")
    state = d.get("state")
    flags = d.get("flags")
    reason = d.get("reason")
    features = d.get("features", [])
    rt = d.get("reason_time")
    if not (
        isinstance(name, str)
        and isinstance(state, str)
        and _strings(flags)
        and _strings(features)
        and (reason is None or isinstance(reason, str))
        and (rt is None or number(rt))
    ):
        raise ValueError("not a node")
    return NodeInfo(name, state, frozenset(flags), reason, tuple(features), reason_time=rt)


def read_owned(path: Path, limit: int = SMALL) -> Any:
    """The JSON in ``path``, when it is a regular file of this user that nobody else may
    write (else ValueError, as for a file of the wrong shape; OSError when unreadable)."""
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise ValueError(f"{path}: not a regular owner-only file of this user")
    return json.loads(read_regular(path, limit))


def board_of(d: Any) -> Board:
    """The board in ``d`` (read by `read_owned`); ValueError, KeyError or TypeError when
    it is of another shape."""
    nodes = {n.name: n for n in map(_node_of, d["nodes"])}
    asked, at, by = d["asked"], d["polled_at"], d["by"]
    if not _strings(asked):
        raise ValueError("asked")
    if not number(at) or not isinstance(by, str):
        raise ValueError("polled_at")
    return Board(float(at), by, frozenset(asked), nodes, d.get("all") is True)


def board_json(board: Board) -> str:
    """The board as the holder writes it."""
    data: dict[str, Any] = {
        "v": VERSION,
        "by": board.by,
        "polled_at": board.polled_at,
        "asked": sorted(board.asked),
        "nodes": [_node_json(n) for n in board.nodes.values()],
    }
    if board.everything:
        data["all"] = True
    return json.dumps(data)
