"""The attempt ledger: ``<checkpoint_dir>/.slurmpre/attempts.jsonl``, appended under a file lock.

One JSON object per line, never rewritten: an attempt's start (job, attempt,
nodes, the checkpoint it resumes from), notices, and its end. Node 0 also
publishes the attempt's checkpoint choice in its own file, which the other
nodes wait for, so every node of an attempt resumes from the same checkpoint.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from slurmpre.errors import CheckpointError, JobEnvironmentError

LEDGER_DIR = ".slurmpre"
ATTEMPTS = "attempts.jsonl"


@dataclass(frozen=True)
class Choice:
    """What every node of one attempt agrees on before launching."""

    job: str
    attempt: int
    resume_from: str | None
    step: int | None
    nodes: tuple[str, ...]
    world_size: int
    previous_world_size: int | None
    rdzv_endpoint: str
    published_at: float


class Ledger:
    def __init__(self, checkpoint_dir: Path) -> None:
        self.dir = checkpoint_dir / LEDGER_DIR
        self.path = self.dir / ATTEMPTS

    def _lock(self, timeout: float = 60.0) -> FileLock:
        return FileLock(str(self.dir / "ledger.lock"), timeout=timeout)

    def ensure(self) -> None:
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CheckpointError(f"cannot create {str(self.dir)!r}: {exc.strerror}") from None

    def append(self, record: dict[str, Any]) -> None:
        line = json.dumps({"time": time.time(), **record}, sort_keys=True) + "\n"
        try:
            with self._lock(), self.path.open("a") as fh:
                fh.write(line)
                fh.flush()
                os.fsync(fh.fileno())
        except Timeout:
            raise CheckpointError(
                f"could not lock {self.dir / 'ledger.lock'} within 60 s"
            ) from None

    def records(self) -> list[dict[str, Any]]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return []
        out = []
        for line in text.splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue  # a line cut short by a kill: the rest still counts
        return out

    def previous_start(self, job: str, attempt: int) -> dict[str, Any] | None:
        """The last attempt started before this one (of this job, else of any job here)."""
        starts = [r for r in self.records() if r.get("event") == "start"]
        before = [r for r in starts if not (r.get("job") == job and r.get("attempt") == attempt)]
        return before[-1] if before else None

    # -- the per-attempt choice ------------------------------------------------
    def _choice_path(self, job: str, attempt: int) -> Path:
        return self.dir / f"choice-{job}-{attempt}.json"

    def publish(self, choice: Choice) -> None:
        path = self._choice_path(choice.job, choice.attempt)
        tmp = path.with_suffix(f".tmp-{os.getpid()}")
        with self._lock():
            tmp.write_text(json.dumps(asdict(choice), sort_keys=True))
            tmp.replace(path)

    def wait_choice(
        self,
        job: str,
        attempt: int,
        timeout: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> Choice:
        path = self._choice_path(job, attempt)
        deadline = clock() + timeout
        while True:
            try:
                data = json.loads(path.read_text())
                data["nodes"] = tuple(data["nodes"])
                return Choice(**data)
            except FileNotFoundError:
                pass
            except (ValueError, TypeError) as exc:
                raise CheckpointError(f"{path} is unreadable: {exc}") from None
            if clock() >= deadline:
                raise JobEnvironmentError(
                    f"node 0 did not publish the checkpoint choice for job {job} attempt {attempt} "
                    f"within {timeout:g} s ({path}); is the checkpoint folder shared by all nodes?"
                )
            sleep(0.1)
