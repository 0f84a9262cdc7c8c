"""The attempt ledger: ``<checkpoint_dir>/.slurmpre/attempts.jsonl``, one JSON object per
line, appended under a file lock and never rewritten (its records: `folder.records`).
Node 0 also publishes the attempt's checkpoint choice in its own file, which the other
nodes wait for, so every node of an attempt resumes from the same checkpoint.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from slurmpre.errors import CheckpointError, JobEnvironmentError
from slurmpre.folder import trust
from slurmpre.folder.access import CONTROL_MODE, OWNER, Access, make_dirs, set_mode
from slurmpre.folder.layout import FolderLayout, attempt_key
from slurmpre.folder.locks import FolderLock, LockTimeout
from slurmpre.folder.record_shape import ShapeError
from slurmpre.folder.records import AttemptId, Record, Start
from slurmpre.reading import LARGE, SMALL, real_inside, skip_line


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
    in_place: int = 0  # restarts inside the allocation within this attempt so far


class Ledger:
    def __init__(
        self,
        checkpoint_dir: Path,
        *,
        clock: Callable[[], float] = time.time,
        warn: Callable[[str], None] | None = None,
        access: Access = OWNER,
        view: bool = False,
    ) -> None:
        """``view``: only read, to be shown (`status`, `plan`): the folder may be another
        user's (a teammate's under group access). Without it, the ledger is what the job
        acts on, and must be this user's own (`slurmpre.folder.trust`)."""
        self.folder = checkpoint_dir
        self.view = view
        self.layout = FolderLayout(checkpoint_dir)
        self.dir = self.layout.meta
        self.access = access
        self.path = self.layout.ledger
        self.clock = clock
        self.warn = warn or (lambda message: print(message, file=sys.stderr, flush=True))
        # What `records` has read: the whole lines, how many, and their records.
        self._read: tuple[bytes, int, list[Record]] = (b"", 0, [])

    def _lock(self, timeout: float = 60.0) -> FolderLock:
        return self._file_lock(self.layout.ledger_lock, timeout)

    def writing_lock(self, timeout: float) -> FolderLock:
        """Held by rank 0 while a checkpoint is written and committed, and by
        `ckpt prune` while it decides what to remove: never both at once."""
        return self._file_lock(self.layout.writing_lock, timeout)

    def _file_lock(self, path: Path, timeout: float) -> FolderLock:
        """A lock in the ledger folder, which is made first with slurmpre's mode."""
        if not self.dir.is_dir():
            self.ensure()
        return FolderLock(path, timeout=timeout, mode=CONTROL_MODE)

    def ensure(self) -> None:
        """Create the ledger folder, the user's own (an existing one must be, and is set to
        the access's mode: no one else ever writes in it)."""
        try:
            make_dirs(self.folder, self.access)
            trust.make_own_dir(self.dir, self.access.meta_mode)
        except OSError as exc:
            raise CheckpointError(f"cannot create {str(self.dir)!r}: {exc.strerror}") from None

    def append(self, record: Record, *, timeout: float = 60.0) -> None:
        """Add one record, stamped with the time unless it has one; a CheckpointError naming
        the file when it cannot be written."""
        self.append_unless(record, None, timeout=timeout)

    def append_unless(
        self, record: Record, taken: Callable[[Record], bool] | None, *, timeout: float = 60.0
    ) -> Record | None:
        """Add ``record`` unless a record already there is ``taken`` (that one is returned,
        and nothing is written): the look and the write under one lock, so of two jobs
        claiming one thing at once, exactly one gets it."""
        if record.time is None:
            record = record.stamped(self.clock())
        line = json.dumps(record.to_json(), sort_keys=True) + "\n"
        try:
            with self._lock(timeout):
                if taken is not None:
                    found = next((r for r in self.records() if taken(r)), None)
                    if found is not None:
                        return found
                with self._open_for_append() as fh:
                    # A kill mid-write leaves a last line without its newline: end it
                    # first, or this record would be glued onto it and lost with it.
                    if fh.tell() > 0 and os.pread(fh.fileno(), 1, fh.tell() - 1) != b"\n":
                        fh.write(b"\n")
                    fh.write(line.encode())
                    fh.flush()
                    os.fsync(fh.fileno())
            return None
        except LockTimeout:
            raise CheckpointError(
                f"could not lock {self.layout.ledger_lock} within {timeout:g} s"
            ) from None
        except OSError as exc:
            raise CheckpointError(
                f"cannot write the ledger {str(self.path)!r}: {exc.strerror or exc}"
            ) from None

    def _open_for_append(self) -> Any:
        """The ledger, the user's own, opened at its end (O_RDWR: its last byte is read)."""
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = trust.open_own(self.path, self.access.ledger_mode, flags=flags)
        set_mode(fd, self.access.ledger_mode)
        fh = os.fdopen(fd, "ab")
        fh.seek(0, os.SEEK_END)
        return fh

    def records(self) -> list[Record]:
        """Every whole record, in order; torn and binary lines, and records of the wrong
        shape, are skipped with a warning (once per line per process).

        The file is read whole every time (with its checks), but the lines read before are
        not parsed again: a record never changes once its line is whole, and the ledger
        is only appended to (a file that does not begin with what was read is read anew)."""
        try:
            data = trust.read(self.path, LARGE, view=self.view)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise CheckpointError(
                f"cannot read the ledger {str(self.path)!r}: {exc.strerror or exc}"
            ) from None
        seen, lines, done = self._read
        if not data.startswith(seen):
            seen, lines, done = b"", 0, []
        whole = data.rfind(b"\n") + 1  # a last line without its newline may still grow
        if whole > len(seen):
            done = done + self._parse(data[len(seen) : whole], lines)
            seen, lines = data[:whole], lines + data.count(b"\n", len(seen), whole)
            self._read = (seen, lines, done)
        # The last line, not ended yet: a record a writer killed before its newline, or one
        # still being written (a reader on a slow shared volume sees it come in pieces):
        # read when whole, never said to be torn while it may still grow.
        return done + self._parse(data[whole:], lines, quiet=True)

    def _parse(self, data: bytes, lines_before: int, *, quiet: bool = False) -> list[Record]:
        out = []
        for number, raw in enumerate(data.split(b"\n"), start=lines_before + 1):
            if not raw.strip():
                continue
            try:
                out.append(Record.from_json(json.loads(raw.decode())))
                continue
            except ShapeError as exc:
                why = str(exc)
            except (UnicodeDecodeError, ValueError):
                why = "not a JSON object"
            if not quiet:
                skip_line(self.path, number, raw, why, self.warn)
        return out

    def previous_start(self, job: str, attempt: AttemptId) -> Start | None:
        """The last attempt started before this one (of this job, else of any job here)."""
        starts = [r for r in self.records() if isinstance(r, Start)]
        before = [r for r in starts if not (r.job == job and r.attempt_id == attempt)]
        return before[-1] if before else None

    # -- the per-attempt choice ------------------------------------------------
    def publish(self, choice: Choice, *, timeout: float = 60.0, resume: bool = False) -> None:
        """Node 0's choice for the attempt; the other nodes wait up to their agree timeout
        for it, so node 0 may wait as long for the lock. ``resume``: a successor's
        checkpoint, chosen once its predecessor has ended (`resume_file`)."""
        key = attempt_key(choice.attempt, choice.in_place)
        path = (self.layout.resume if resume else self.layout.choice)(choice.job, key)
        try:
            with self._lock(timeout):
                trust.write(path, json.dumps(asdict(choice), sort_keys=True), mode=CONTROL_MODE)
        except LockTimeout:
            raise CheckpointError(
                f"could not lock {self.layout.ledger_lock} within {timeout:g} s"
            ) from None
        except OSError as exc:
            raise CheckpointError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from None

    def wait_choice(
        self,
        job: str,
        attempt: str | int,
        timeout: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        resume: bool = False,
    ) -> Choice:
        attempt = str(attempt)  # 3, or "3.1" after an in-place restart
        path = (self.layout.resume if resume else self.layout.choice)(job, attempt)
        deadline = clock() + timeout
        while True:
            try:
                text = trust.read_text(path, SMALL)
            except FileNotFoundError:
                pass
            except (OSError, UnicodeDecodeError) as exc:
                raise CheckpointError(f"cannot read {path}: {exc}") from None
            else:
                return self._trusted_choice(path, text, job, attempt)
            if clock() >= deadline:
                raise JobEnvironmentError(
                    f"node 0 did not publish the checkpoint choice for job {job} attempt {attempt} "
                    f"within {timeout:g} s ({path}); is the checkpoint folder shared by all nodes?"
                )
            sleep(0.2 if resume else 0.1)

    def _trusted_choice(self, path: Path, text: str, job: str, attempt: str) -> Choice:
        """The choice in ``text``, once every field has the type it must have and the
        checkpoint it names lies inside this folder; a CheckpointError otherwise."""

        def bad(why: str) -> CheckpointError:
            return CheckpointError(f"{path} is not a choice this node can trust: {why}")

        try:
            data = json.loads(text)
        except ValueError as exc:
            raise bad(f"not JSON ({exc})") from None
        if not isinstance(data, dict) or set(data) != set(_CHOICE_TYPES):
            raise bad(f"it must hold exactly the keys {', '.join(sorted(_CHOICE_TYPES))}")
        for key, types in _CHOICE_TYPES.items():
            value = data[key]
            if isinstance(value, bool) or not isinstance(value, types):
                raise bad(f"{key} = {value!r} has the wrong type")
        if data["job"] != job or attempt_key(data["attempt"], data["in_place"]) != attempt:
            raise bad(f"it is for job {data['job']!r} attempt {data['attempt']!r}")
        if not all(isinstance(n, str) and n for n in data["nodes"]) or not data["nodes"]:
            raise bad(f"nodes = {data['nodes']!r} must be node names")
        if data["world_size"] < 1 or (data["step"] is not None and data["step"] < 0):
            raise bad("world_size and step must not be negative")
        if data["attempt"] < 0 or data["in_place"] < 0:
            raise bad("attempt and in_place must not be negative")
        resume = data["resume_from"]
        if resume is not None and not _inside(Path(resume), self.folder):
            raise bad(f"resume_from = {resume!r} is not inside {str(self.folder)!r}")
        data["nodes"] = tuple(data["nodes"])
        return Choice(**data)


_CHOICE_TYPES: dict[str, type | tuple[type, ...]] = {
    "job": str,
    "attempt": int,
    "in_place": int,
    "resume_from": (str, type(None)),
    "step": (int, type(None)),
    "nodes": list,
    "world_size": int,
    "previous_world_size": (int, type(None)),
    "rdzv_endpoint": str,
    "published_at": (int, float),
}


def _inside(path: Path, folder: Path) -> bool:
    """``path`` names an entry below ``folder`` (not the folder itself) once symlinks and
    ``..`` are resolved."""
    try:
        return os.path.realpath(path) != os.path.realpath(folder) and real_inside(
            path, os.path.realpath(folder)
        )
    except (OSError, ValueError):
        return False
