"""A preemption notice, and the file that carries it from node 0 to every rank.

Node 0's watcher writes ``<checkpoint_dir>/.slurmpre/notice-<job>-<attempt>.json``
(atomically) when it sees a drain or a time-limit warning; ranks learn of it
through `slurmpre.preemption_requested()`, and each node's wrapper can relay
it to its child as a signal.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from slurmpre.job.ledger import LEDGER_DIR


@dataclass(frozen=True)
class Notice:
    kind: str  # "drain" or "time-limit"
    node: str | None
    reason: str | None
    seen_at: float  # wall-clock seconds

    def describe(self) -> str:
        where = f" of {self.node}" if self.node else ""
        why = f" ({self.reason})" if self.reason else ""
        return f"{self.kind}{where}{why}"


def notice_path(folder: Path, job_tag: str, attempt: int) -> Path:
    return folder / LEDGER_DIR / f"notice-{job_tag}-{attempt}.json"


def write_notice(path: Path, notice: Notice) -> None:
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(asdict(notice), sort_keys=True))
    tmp.replace(path)


def read_notice(path: Path) -> Notice | None:
    try:
        return Notice(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None
