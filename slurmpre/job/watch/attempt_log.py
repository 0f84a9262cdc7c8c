"""This attempt's lines in the job's ledger, as the watcher and its restarts write them.

Every record carries the job, the attempt and whether it runs in place; the ledger
failing never stops the watching: it is said, and the job goes on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from slurmpre.errors import SlurmpreError
from slurmpre.folder import records
from slurmpre.folder.ledger import Ledger
from slurmpre.job.start.env import JobEnv


class AttemptLog:
    def __init__(self, ledger: Ledger, job: JobEnv, say: Callable[[str], None]) -> None:
        self.ledger, self.job, self.say = ledger, job, say

    def add(self, of: type[records.AttemptRecord], **fields: Any) -> None:
        """Append one record of type ``of`` for this attempt, with ``fields``."""
        try:
            self.ledger.append(
                of(
                    job=self.job.tag,
                    attempt=self.job.restart_count,
                    in_place=self.job.in_place,
                    **fields,
                )
            )
        except SlurmpreError as exc:
            self.say(f"could not write the ledger (watching goes on): {exc}")

    def records(self) -> list[records.Record]:
        """Every record of the folder's ledger (empty, and said, when it cannot be read)."""
        try:
            return self.ledger.records()
        except SlurmpreError as exc:
            self.say(f"could not read the ledger: {exc}")
            return []
