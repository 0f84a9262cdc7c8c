"""Ledger records for tests: a record from the few keys a test cares about (the others
get plain defaults), and a ledger's records as the JSON objects the file holds."""

from __future__ import annotations

import dataclasses
from typing import Any

from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import Record

_DEFAULTS: dict[str, dict[str, Any]] = {
    "submitted": {"job": "1", "name": "n"},
    "start": {"job": "1", "attempt": 0, "nodes": ["n1"], "num_nodes": 1, "world_size": 1},
    "end": {"job": "1", "attempt": 0, "exit_code": 0, "seconds": 1.0},
    "checkpoint": {"job": "1", "attempt": 0, "step": 0, "path": "/c", "after_notice": False},
    "notice": {"job": "1", "attempt": 0, "kind": "drain", "node": None, "reason": None,
               "seen_at": 0.0, "first": True},
    "requeued": {"job": "1", "attempt": 0, "why": "notice", "requeued_at": 0.0},
}  # fmt: skip


def record(fields: dict[str, Any]) -> Record:
    """The record ``fields`` describes (``event`` and what the test cares about); without a
    ``time``, the ledger stamps it when it appends it."""
    read = Record.from_json({"time": 0.0, **_DEFAULTS.get(fields["event"], {}), **fields})
    return read if "time" in fields else dataclasses.replace(read, time=None)


def dicts(ledger: Ledger) -> list[dict[str, Any]]:
    """The ledger's records, each as the JSON object its line holds."""
    return [r.to_json() for r in ledger.records()]
