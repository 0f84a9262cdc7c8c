"""Pruning a checkpoint folder from the login node: old checkpoints go, what a job needs stays
(what is kept and why: docs/how-it-works.md, docs/login.md).

Under the folder's writing lock, which rank 0 holds from a checkpoint's first byte to its
commit, each victim is only renamed to a hidden ``.pruned-`` name (fast, and invisible to
the resolver); the deletion happens after the lock is released, and a prune killed midway
leaves only such names, which the next prune (or the next attempt's start) removes.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from slurmpre.errors import CheckpointError, JobNotFound, SlurmError, UsageError
from slurmpre.folder.checkpoints import Checkpoint, list_all
from slurmpre.folder.checkpoints.names import number_of
from slurmpre.folder.layout import LEFTOVER, PRUNED, FolderLayout
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.locks import LockTimeout
from slurmpre.folder.owner import recorded_jobs
from slurmpre.folder.records import Start
from slurmpre.login import progress
from slurmpre.slurm.client import SlurmClient

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class Entry:
    name: str  # its path relative to the folder (Lightning's are below version_N/)
    why: str
    size: int  # bytes, -1 when it could not be measured


@dataclass(frozen=True)
class Failed:
    """What could not be removed: its name, where it stays, what was freed of it, and why."""

    name: str
    left_as: str  # its name now (prune renames before it deletes), relative to the folder
    why: str
    freed: int


@dataclass(frozen=True)
class Pruned:
    removed: tuple[Entry, ...]
    kept: tuple[Entry, ...]
    dry_run: bool
    failed: tuple[Failed, ...] = ()

    @property
    def freed(self) -> int:
        return sum(e.size for e in self.removed if e.size > 0) + sum(
            f.freed for f in self.failed if f.freed > 0
        )


def size_of(path: Path) -> int:
    """Bytes under ``path`` (symlinks not followed); -1 if it cannot be read, 0 if gone."""
    try:
        if not os.path.lexists(path):
            return 0
        if not path.is_dir() or path.is_symlink():
            return path.lstat().st_size
        total = 0
        for root, _, files in os.walk(path):
            for name in files:
                total += (Path(root) / name).lstat().st_size
        return total
    except OSError:
        return -1


def live_jobs(ledger: Ledger, client: SlurmClient) -> set[str]:
    """Jobs the ledger names that may still run: live in Slurm, or not judged."""
    live = set()
    for job in recorded_jobs(ledger):
        try:
            info = client.job(job)
        except JobNotFound:
            continue  # long gone
        except SlurmError:
            LOG.info(f"cannot tell whether job {job} still runs: keeping what it may need")
            live.add(job)
            continue
        if not info.finished:
            live.add(job)
    return live


def decide(
    folder: Path, keep: int, live: set[str], ledger: Ledger
) -> tuple[list[tuple[Path, str]], list[tuple[Path, str]]]:
    """(to remove, to keep), each with why; reads the folder and the ledger only."""
    found = [c for c in list_all(folder) if os.path.lexists(c.where)]
    complete = [c for c in found if c.complete]
    newest = complete[0] if complete else None
    kept_complete = set(complete[:keep])
    resumed = {
        os.path.realpath(r.resume_from)
        for r in ledger.records()
        if isinstance(r, Start) and r.job in live and r.resume_from
    }
    remove: list[tuple[Path, str]] = []
    kept: list[tuple[Path, str]] = []

    def verdict(c: Checkpoint) -> str | None:
        """Why ``c`` stays, or None if it can go."""
        if c is newest:
            return "the newest complete checkpoint"
        if os.path.realpath(c.where) in resumed:
            return "a live job resumed from it"
        if newest is None:
            return "partial, and no checkpoint here is complete: it may still be written"
        if not _older(c, newest):
            what = "complete" if c.complete else "partial"
            if c.step is None or newest.step is None:
                return f"{what}, written after the newest complete (no step to compare)"
            if c.step == newest.step:
                return f"{what}, of the same step as the newest complete"
            return f"{what}, newer than the newest complete: it may still be written"
        if c in kept_complete:
            return f"among the newest {keep} complete"
        return None

    for c in found:
        why = verdict(c)
        if why is None:
            reason = (
                f"complete, older than the newest {keep} complete"
                if c.complete
                else "partial, older than the newest complete checkpoint"
            )
            remove.append((Path(c.where), reason))
        else:
            kept.append((Path(c.where), why))
    live_tags = tuple(f"{job}-" for job in live)
    try:
        names = sorted(os.listdir(folder))  # noqa: PTH208
    except OSError as exc:
        raise CheckpointError(f"cannot read {str(folder)!r}: {exc.strerror}") from None
    for name in names:
        m = LEFTOVER.match(name)
        if m is None:
            continue
        tag = m.group("tag")
        if tag is not None and tag.startswith(live_tags):
            kept.append((folder / name, "in flight in a live job"))
        else:
            remove.append((folder / name, "left by a dead attempt"))
    return remove, kept


def _older(c: Checkpoint, than: Checkpoint) -> bool:
    """Is ``c`` known to be older than ``than``? By their steps when both names give one
    (one step in two spellings is not older); by their numbers for two of one numbered
    family (Lightning's ``hpc_ckpt_9`` before ``hpc_ckpt_10``, whatever their files'
    times); else by when each was last written (``last.ckpt`` has no step, and is written
    last)."""
    if c.step is not None and than.step is not None:
        return c.step < than.step
    mine, theirs = number_of(c.name), number_of(than.name)
    if mine is not None and theirs is not None and mine[0] == theirs[0]:
        return mine < theirs
    try:
        return os.lstat(c.where).st_mtime_ns < os.lstat(than.where).st_mtime_ns
    except OSError:
        return False


def prune(
    folder: Path,
    keep: int,
    client: SlurmClient,
    *,
    dry_run: bool = False,
    wait: float = 60.0,
) -> Pruned:
    ledger = _checked(folder, keep, wait)
    live = live_jobs(ledger, client)
    root = os.path.realpath(folder)
    try:
        lock = progress.acquire(
            ledger.writing_lock(wait), f"waiting for the checkpoint being written in {folder}"
        )
        try:
            remove, kept = decide(folder, keep, live, ledger)
            sized = [(path, _shown(path, folder), why, size_of(path)) for path, why in remove]
            for path, *_ in sized:
                _own_entry(path, folder, root)
            if not dry_run:
                sized = [(_set_aside(path), shown, why, size) for path, shown, why, size in sized]
        finally:
            lock.release()
    except LockTimeout:
        raise CheckpointError(
            f"a checkpoint is being written in {str(folder)!r} (its writing lock was held for "
            f"{wait:g} s): nothing removed; try again, or wait longer with --wait"
        ) from None
    except OSError as exc:
        raise CheckpointError(f"cannot prune {str(folder)!r}: {exc.strerror or exc}") from None
    removed: list[Entry] = []
    failed: list[Failed] = []
    for aside, shown, why, size in sized:
        error = None if dry_run else _delete(aside)
        if error is None:
            removed.append(Entry(shown, why, size))
            continue
        left = size_of(aside)
        freed = size - left if size >= 0 and left >= 0 else -1
        failed.append(Failed(shown, os.path.relpath(aside, folder), error, freed))
    return Pruned(
        tuple(removed),
        tuple(Entry(_shown(path, folder), why, -1) for path, why in kept),
        dry_run,
        tuple(failed),
    )


def _checked(folder: Path, keep: int, wait: float) -> Ledger:
    """The folder's ledger, once the arguments and the folder are fit to prune."""
    if keep < 1:
        raise UsageError(f"--keep {keep}: keep 1 or more (the newest complete one always stays)")
    if not wait >= 0:
        raise UsageError(f"--wait {wait:g}: give 0 seconds or more")
    if not folder.is_dir():
        raise CheckpointError(f"checkpoint folder {str(folder)!r} does not exist")
    ledger = Ledger(folder)
    if ledger.dir.is_symlink():
        # Its lock and its records would be somewhere else: prune takes a lock there.
        raise CheckpointError(
            f"{str(ledger.dir)!r} is a link: slurmpre keeps its records only in a folder "
            "of the checkpoint folder itself, so it prunes nothing"
        )
    if not ledger.dir.is_dir():
        # Nothing of slurmpre's here, so no rank 0 takes the writing lock: refuse
        # rather than guess whether something writes into the folder right now.
        raise CheckpointError(
            f"{str(folder)!r} has no {ledger.dir.name}/ folder: slurmpre does not know "
            "what writes here, so it prunes nothing"
        )
    return ledger


def _own_entry(path: Path, folder: Path, root: str) -> None:
    """Refuse to touch ``path`` unless it is an entry of ``folder``'s own tree: no link on
    the way to it, itself inside. (The resolver never hands prune anything else; this
    keeps it so whatever a later change does.)"""
    parent = os.path.realpath(path.parent)
    lexical = os.path.normpath(Path(root) / os.path.relpath(path.parent, folder))
    if parent != lexical or not (parent == root or parent.startswith(root + os.sep)):
        raise CheckpointError(
            f"{str(path)!r} is reached through a link that leaves {str(folder)!r}: nothing removed"
        )


def _shown(path: Path, folder: Path) -> str:
    """``path`` relative to the folder, as prune's output names it; what an earlier prune
    set aside by the name it had."""
    path = FolderLayout.unpruned(path)
    try:
        return path.relative_to(folder).as_posix()
    except ValueError:
        return str(path)


def _set_aside(path: Path) -> Path:
    if path.name.startswith(PRUNED):
        return path
    aside = FolderLayout.pruned(path, time.time_ns())
    path.rename(aside)
    return aside


def _delete(path: Path) -> str | None:
    """Remove ``path`` (a folder with what it holds; a link itself, never what it leads to);
    None once it is gone, else why not (the first error met)."""
    errors: list[str] = []

    def note(_func: object, where: str, exc_info: object) -> None:
        exc = exc_info[1] if isinstance(exc_info, tuple) else exc_info
        if not errors:
            strerror = getattr(exc, "strerror", None) or str(exc)
            errors.append(f"{strerror}: {where}")

    try:
        if path.is_dir() and not path.is_symlink():
            if sys.version_info >= (3, 12):
                shutil.rmtree(path, onexc=note)
            else:
                shutil.rmtree(path, onerror=note)
        else:
            path.unlink(missing_ok=True)
    except OSError as exc:
        errors.append(exc.strerror or str(exc))
    if not os.path.lexists(path):
        return None
    return errors[0] if errors else "still there"


def human(size: int) -> str:
    if size < 0:
        return "?"
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TB"
