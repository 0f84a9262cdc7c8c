"""The newest complete checkpoint of a folder, and every checkpoint in it, judged."""

from __future__ import annotations

import os
from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from itertools import compress, count
from pathlib import Path

from slurmpre.errors import CheckpointError
from slurmpre.folder.checkpoints.layouts import _MARKS, _check_dir, _zip_complete
from slurmpre.folder.checkpoints.names import (
    _ANY_NAME,
    _OWN_LIMIT,
    DEEPSPEED_NAME,
    DEEPSPEED_TAG,
    MAX_STEP,
    SLURMPRE_NAME,
    STEP_NAME,
    TORCHTITAN_FOLDER,
    Checkpoint,
    Format,
    step_of,
)
from slurmpre.folder.checkpoints.scan import (
    _TITAN_STEP,
    LIGHTNING_LOGS,
    Beside,
    Ignored,
    _beside_of,
    _Candidate,
    _candidate,
    _fit,
    _Named,
    _open_folder,
    _order,
    _own,
    _read,
    _real_dir,
    _scan,
)
from slurmpre.folder.layout import step_dir_name
from slurmpre.folder.trust import owner_name


@dataclass(frozen=True)
class Resolution:
    """The newest complete checkpoint; the newest ones passed over, each judged in full
    (as many as the logs name, SHOWN); and how many more newer ones were passed over."""

    checkpoint: Checkpoint | None
    skipped: tuple[Checkpoint, ...] = field(default=())
    more: int = 0


def _judge(c: _Candidate, beside: Beside) -> Checkpoint:
    """A candidate whose kind is known (see _fit), judged."""
    if not c.is_dir:
        ok, why = _zip_complete(Path(c.path), os.path.realpath(Path(c.path).parent))
        return Checkpoint(c.path, c.step, Format.LIGHTNING, ok, why)
    try:
        fmt, ok, why = _check_dir(c.path, c.name, c.group, beside)
    except OSError as exc:
        fmt, ok, why = Format.UNKNOWN, False, f"cannot be read: {exc.strerror}"
    return Checkpoint(c.path, c.step, fmt, ok, why)


def _deepspeed_target_missing(folder: Path, tag: str | None, names: list[str]) -> Checkpoint | None:
    if tag is None or tag in names:
        return None
    return Checkpoint(
        str(Path(folder) / tag),
        step_of(tag),
        Format.DEEPSPEED,
        False,
        f"corrupt: '{DEEPSPEED_TAG}' names {tag}, which does not exist",
    )


# How many passed-over checkpoints the logs name one by one (summarize); the rest are counted.
SHOWN = 3
# Each layout's marks as lookups relative to the folder, for `latest`'s hot path.
_LOOKUPS = {group: tuple(os.sep + m for m in marks) for group, marks in _MARKS.items()}
# With a `latest` tag, DeepSpeed folders are judged against it instead.
_LOOKUPS_TAGGED = {g: v for g, v in _LOOKUPS.items() if g != DEEPSPEED_NAME}
_OWN_MARK = _LOOKUPS[SLURMPRE_NAME][0]  # its one mark, from the table


def _newer(c: _Named) -> int:
    """An ascending key for the order of _order: minus the step; stepless ones last."""
    return MAX_STEP + 1 if c[0] is None else -c[0]


def latest(folder: Path | str, *, owners: frozenset[int] | None = None) -> Resolution:
    """The newest complete checkpoint under ``folder`` (None if there is none). With
    ``owners``, the newest that one of them committed (for slurmpre's own layout, its
    marker is theirs; else the entry itself): what a job resumes from is never a
    checkpoint someone else put in a folder the group may write (docs/security.md)."""
    folder = Path(folder)
    at = _open_folder(folder)
    try:
        names, own, others, beside = _read(folder, at)
        resolve = _Resolve(folder, at, beside, owners)
        missing = _deepspeed_target_missing(folder, beside.tag, names)
        if missing is not None:
            resolve.shown.append(missing)
        found = resolve.run(own, _order(others, folder))
    finally:
        os.close(at)
    return Resolution(found, tuple(resolve.shown), resolve.more)


class _Resolve:
    """One resolution: candidates newest first, until one is complete.

    The hot path is 10,000 partial folders newer than the last complete one. Each
    costs one lookup per mark of its layout, and no more when none is there; in
    slurmpre's own layout that is one lookup, made in C over the whole run of them.
    The first SHOWN passed over are judged in full, for the log; the rest are counted.
    """

    def __init__(
        self, folder: Path, at: int, beside: Beside, owners: frozenset[int] | None = None
    ) -> None:
        self.folder, self.at, self.beside, self.owners = folder, at, beside, owners
        self.root = os.path.realpath(folder)
        self.lookups = _LOOKUPS if beside.tag is None else _LOOKUPS_TAGGED
        self.shown: list[Checkpoint] = []
        self.more = 0

    def run(self, own: list[str], others: list[_Named]) -> Checkpoint | None:
        """``own`` (oldest first) and ``others`` (newest first), merged by step: each
        stretch of one kind is walked in one go; for one step in two spellings,
        slurmpre's own comes first."""
        top, i, n = len(own), 0, len(others)  # own[:top] and others[i:] are left
        while top or i < n:
            if top:  # own names of others[i]'s step and above come first
                step = others[i][0] if i < n else None
                if step is None:
                    cut = 0
                elif step >= _OWN_LIMIT:
                    cut = top
                else:
                    cut = bisect_left(own, step_dir_name(step), 0, top)
                if cut < top:
                    names = own[cut:top][::-1]
                    found = self.walk(partial(self.own_at, names), self.own(names), len(names))
                    if found is not None:
                        return found
                    top = cut
            if i < n:  # then the others above the newest own name left
                j = n if not top else bisect_left(others, -int(own[top - 1][5:]), i, n, key=_newer)
                stretch = others[i:j]
                found = self.walk(partial(self.other_at, stretch), map(self.marked, stretch), j - i)
                if found is not None:
                    return found
                i = j
        return None

    def own(self, names: list[str]) -> Iterator[bool]:
        """slurmpre's own folders: one lookup each, for its marker."""
        access, exists, at = os.access, os.F_OK, self.at
        return (access(name + _OWN_MARK, exists, dir_fd=at) for name in names)

    def own_at(self, names: list[str], k: int) -> _Candidate:
        return _own(self.folder, names[k])

    def other_at(self, named: list[_Named], k: int) -> _Candidate:
        return _candidate(self.folder, named[k])

    def marked(self, c: _Named) -> bool:
        """Has the candidate one of its layout's marks (or none to look for)?"""
        marks = self.lookups.get(c[2])
        if marks is None:
            return True
        name, access, exists, at = c[1], os.access, os.F_OK, self.at
        for mark in marks:  # noqa: SIM110 - any() builds a generator per candidate
            if access(name + mark, exists, dir_fd=at):
                return True
        return False

    def walk(
        self, candidate: Callable[[int], _Candidate], marked: Iterator[bool], n: int
    ) -> Checkpoint | None:
        """Candidates 0..n-1, newest first: ``marked`` (lazy, drained by compress in C)
        says which to look at further; the others are passed over."""
        done = 0
        for i in compress(count(), marked):
            self.missed(candidate, done, i)
            found = self.judged(candidate(i))
            if found is not None:
                return found
            done = i + 1
        self.missed(candidate, done, n)
        return None

    def missed(self, candidate: Callable[[int], _Candidate], lo: int, hi: int) -> None:
        while lo < hi and len(self.shown) < SHOWN:
            self.passed(candidate(lo))
            lo += 1
        self.more += hi - lo

    def passed(self, c: _Candidate) -> None:
        """A candidate without its layout's mark: judged in full while the log names them
        (an entry that is no checkpoint, a file by a folder's name, drops out), then counted."""
        if len(self.shown) >= SHOWN:
            self.more += 1
            return
        fit = _fit(c, self.root)
        if not isinstance(fit, str):
            self.shown.append(_judge(fit, self.beside))

    def judged(self, c: _Candidate) -> Checkpoint | None:
        """A candidate with a mark, or with none to look for: complete, or passed over."""
        fit = _fit(c, self.root)
        if isinstance(fit, str):
            return None  # not a checkpoint after all, as `ckpt list --all` says
        judged = _judge(fit, self.beside)
        if judged.complete and self.owners is not None:
            judged = self._committed_by_owner(judged, c)
        if judged.complete:
            return judged
        if len(self.shown) < SHOWN:
            self.shown.append(judged)
        else:
            self.more += 1
        return None

    def _committed_by_owner(self, judged: Checkpoint, c: _Candidate) -> Checkpoint:
        """``judged``, or the same passed over when someone else committed it."""
        name = c[1]
        mark = name + _OWN_MARK if c[2] == SLURMPRE_NAME else name
        try:
            uid = os.stat(mark, dir_fd=self.at, follow_symlinks=False).st_uid
        except OSError:
            return judged._replace(complete=False, reason="gone while it was judged")
        if self.owners is not None and uid not in self.owners:
            why = f"committed by {owner_name(uid)}, not by this job's user: not resumed from"
            return judged._replace(complete=False, reason=why)
        return judged


def findable(folder: Path | str, path: Path | str) -> bool:
    """Would the resolver look at ``path`` when it scans ``folder``? (Its top level,
    Lightning's ``lightning_logs/version_N/checkpoints/`` and torchtitan's
    ``checkpoint/step-N``.)"""
    try:
        rel = Path(path).resolve().relative_to(Path(folder).resolve())
    except ValueError:
        return False
    return _below(rel.parts)


def _below(parts: tuple[str, ...]) -> bool:
    return (
        len(parts) == 1
        or (len(parts) == 2 and parts[0] == TORCHTITAN_FOLDER and _TITAN_STEP(parts[1]) is not None)
        or (
            len(parts) == 4
            and parts[0] == LIGHTNING_LOGS
            and parts[1].startswith("version_")
            and parts[2] == "checkpoints"
        )
    )


def judge(path: Path | str, folder: Path | str | None = None) -> Checkpoint:
    """One checkpoint (a folder or a Lightning file), judged as the resolver would, from
    the checkpoint folder that holds it: ``folder`` when given and ``path`` is found
    there, else by its spelling (its parent; the folder above ``lightning_logs`` for
    Lightning's layout, above ``checkpoint`` for torchtitan's). A link anywhere below
    that folder makes it no checkpoint."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{str(path)!r} does not exist")
    if not (path.is_dir() or path.is_file()):
        raise CheckpointError(f"{str(path)!r} is neither a folder nor a file")
    home = _home(path, None if folder is None else Path(folder))
    titan = path.relative_to(home).parts
    if len(titan) == 2 and titan[0] == TORCHTITAN_FOLDER and (t := _TITAN_STEP(path.name)):
        group: int | None = STEP_NAME  # torchtitan's step-N, at any width
        step: int | None = int(t[1])
    else:
        m = _ANY_NAME.fullmatch(path.name)
        if m is None:
            return Checkpoint(str(path), None, Format.UNKNOWN, False, "not a checkpoint name")
        group = m.lastindex
        step = None if group is None else int(m[group])
    between = path.parents[: len(path.relative_to(home).parts) - 1]
    if not all(map(_real_dir, between)):
        why = "a link on the way to it: where it leads is not in the checkpoint folder's own tree"
        return Checkpoint(str(path), step, Format.UNKNOWN, False, why)
    fit = _fit(_Candidate(step, path.name, group, str(path), None), os.path.realpath(home))
    if isinstance(fit, str):
        return Checkpoint(str(path), step, Format.UNKNOWN, False, fit)
    return _judge(fit, _beside_of(path.parent))


def _home(path: Path, folder: Path | None = None) -> Path:
    """The checkpoint folder the resolver would find ``path`` in: ``folder`` if it is
    found there, else by its spelling."""
    if folder is not None:
        try:
            if _below(path.relative_to(folder).parts):
                return folder
        except ValueError:
            pass
    parts = path.parts
    if len(parts) >= 3 and parts[-2] == TORCHTITAN_FOLDER and _TITAN_STEP(parts[-1]):
        return path.parents[1]
    if (
        len(parts) >= 4
        and parts[-4] == LIGHTNING_LOGS
        and parts[-3].startswith("version_")
        and parts[-2] == "checkpoints"
    ):
        return path.parents[3]
    return path.parent


def list_all(folder: Path | str) -> list[Checkpoint]:
    """Every checkpoint candidate, newest first, each judged."""
    folder = Path(folder)
    scan = _scan(folder)
    out = [_judge(c, scan.beside) for c in _order(scan.candidates, folder)]
    names = [c.name for c in scan.candidates] + [i.name for i in scan.ignored]
    missing = _deepspeed_target_missing(folder, scan.beside.tag, names)
    return ([missing] if missing else []) + out


def ignored(folder: Path | str) -> list[Ignored]:
    return sorted(_scan(Path(folder)).ignored, key=lambda i: i.name)


def summarize(found: Resolution) -> list[str]:
    """'passing over' lines for the ones judged in full; one summary line for the rest."""
    lines = [f"passing over {s.name}: {s.reason}" for s in found.skipped]
    if found.more:
        lines.append(f"... and {found.more} more newer ones that are not complete")
    return lines
