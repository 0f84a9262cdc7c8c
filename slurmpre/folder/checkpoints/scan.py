"""One read of a checkpoint folder: its candidates by name alone, in the order they are
judged (newest first), and the entries that are not checkpoints, with why."""

from __future__ import annotations

import operator
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from itertools import filterfalse
from pathlib import Path
from stat import S_ISDIR, S_ISLNK, S_ISREG
from typing import NamedTuple, TypeVar

from slurmpre.errors import CheckpointError
from slurmpre.folder.checkpoints.names import (
    _ANY_NAME,
    _DIR_GROUPS,
    _MAYBE,
    _OWN,
    DEEPSPEED_TAG,
    MEGATRON_NAME,
    MEGATRON_TRACKER,
    NEMO_UNFINISHED,
    SLURMPRE_NAME,
    STEP_NAME,
    TORCHTITAN_FOLDER,
    number_of,
    step_of,
)
from slurmpre.reading import (
    SMALL,
    read_text,
    real_inside,
)

# A candidate by its name alone: (step, name relative to the folder, grammar group).
# A plain tuple: a folder can hold 10,000, and a path or a NamedTuple each would cost
# more than reading their names.
_Named = tuple[int | None, str, int | None]


class _Candidate(NamedTuple):
    """A candidate about to be judged; its first three fields are its _Named."""

    step: int | None
    name: str  # relative to the checkpoint folder
    group: int | None  # which grammar matched: the layout (see _MARKS)
    path: str
    is_dir: bool | None  # None: not looked at yet (the name alone made it a candidate)


class Beside(NamedTuple):
    """What a folder holds beside its candidates that judges them: DeepSpeed's ``latest``
    tag; Megatron-LM's tracker, as read ("" when it cannot be read, None when absent),
    and the newest ``iter_N`` step; NeMo's ``NAME-unfinished`` marks, by NAME."""

    tag: str | None = None
    tracker: str | None = None
    newest_iter: int | None = None
    unfinished: frozenset[str] = frozenset()

    @property
    def tag_step(self) -> int | None:
        return step_of(self.tag) if self.tag else None


_NOTHING_BESIDE = Beside()


def _beside(folder: Path, names: list[str], others: list[_Named]) -> Beside:
    # DeepSpeed's ``latest`` tag beside its ``global_stepN`` folders, if it reads as one.
    tag = (_small(folder, DEEPSPEED_TAG) or None) if DEEPSPEED_TAG in names else None
    tracker = _small(folder, MEGATRON_TRACKER) if MEGATRON_TRACKER in names else None
    iters = [c[0] for c in others if c[2] == MEGATRON_NAME and c[0] is not None]
    cut = len(NEMO_UNFINISHED)
    unfinished = frozenset(n[:-cut] for n in names if n.endswith(NEMO_UNFINISHED))
    if tag is None and tracker is None and not iters and not unfinished:
        return _NOTHING_BESIDE
    return Beside(tag, tracker, max(iters, default=None), unfinished)


def _beside_of(folder: Path) -> Beside:
    """What lies beside the candidates of ``folder``, for one judged on its own."""
    try:
        names = os.listdir(folder)  # noqa: PTH208 - names, as _read has them
    except OSError:
        return _NOTHING_BESIDE
    iters: list[_Named] = [
        (int(m[MEGATRON_NAME]), n, MEGATRON_NAME)
        for n in names
        if (m := _ANY_NAME.fullmatch(n)) is not None and m.lastindex == MEGATRON_NAME
    ]
    return _beside(folder, names, iters)


def _small(folder: Path, name: str) -> str:
    try:
        return read_text(folder / name, SMALL, root=os.path.realpath(folder)).strip()
    except (OSError, UnicodeDecodeError):
        return ""


@dataclass(frozen=True)
class Ignored:
    """An entry of the folder that is not a checkpoint, and why (``ckpt list --all``)."""

    name: str
    reason: str


@dataclass
class _Scan:
    candidates: list[_Candidate]
    beside: Beside
    ignored: list[Ignored]


def _open_folder(folder: Path) -> int:
    """The checkpoint folder, opened: marks are then looked up relative to it."""
    try:
        return os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint folder {str(folder)!r} does not exist") from None
    except NotADirectoryError:
        raise CheckpointError(f"checkpoint folder {str(folder)!r} is not a folder") from None
    except PermissionError:
        raise CheckpointError(f"checkpoint folder {str(folder)!r} cannot be read") from None
    except OSError as exc:
        raise CheckpointError(f"checkpoint folder {str(folder)!r}: {exc.strerror}") from None


def _read(folder: Path, at: int) -> tuple[list[str], list[str], list[_Named], Beside]:
    """One directory read: its names; slurmpre's own ``step-NNNNNNNN`` names below step
    10^8, in step order (their string order); every other candidate by name alone; and
    what lies beside them (`Beside`). Nothing is looked at, and a name no grammar allows
    costs one C-level search: 10,000 junk names cost about what os.listdir does."""
    try:
        names = os.listdir(at)
    except OSError as exc:
        raise CheckpointError(f"checkpoint folder {str(folder)!r}: {exc.strerror}") from None
    maybe = list(filter(_MAYBE, names))
    own = sorted(filter(_OWN, maybe))
    # The rest, by the full grammar (none at all in a folder only slurmpre writes to).
    rest = filterfalse(set(own).__contains__, maybe) if len(own) < len(maybe) else ()
    others: list[_Named] = []
    add = others.append
    for m in filter(None, map(_ANY_NAME.fullmatch, rest)):
        group = m.lastindex
        add((None if group is None else int(m[group]), m.string, group))
    if LIGHTNING_LOGS in names:
        others += _lightning(folder / LIGHTNING_LOGS)
    if TORCHTITAN_FOLDER in names:
        others += _torchtitan(folder / TORCHTITAN_FOLDER)
    return names, own, others, _beside(folder, names, others)


def _own(folder: Path, name: str) -> _Candidate:
    """One of _read's own names as a candidate."""
    return _Candidate(int(name[5:]), name, SLURMPRE_NAME, f"{folder}{os.sep}{name}", None)


def _candidate(folder: Path, c: _Named) -> _Candidate:
    return _Candidate(c[0], c[1], c[2], f"{folder}{os.sep}{c[1]}", None)


def _fit(c: _Candidate, root: str) -> _Candidate | str:
    """The candidate with its kind of entry, if that is what its name says (a folder, or
    a Lightning file or ``.ckpt`` folder); else why not. A symlink is never a checkpoint:
    it is a second name for one (whose own name is judged), or leads out of the folder,
    and a prune that counted it would delete what it leads to as an older copy."""
    if c.is_dir is not None:
        return c
    try:
        st = os.lstat(c.path)
    except OSError as exc:
        return f"cannot be read: {exc.strerror}"
    if S_ISLNK(st.st_mode):
        return _link_reason(c.path, root)
    is_dir = S_ISDIR(st.st_mode)
    if c.group is not None and c.group <= _DIR_GROUPS:
        fits = is_dir
    else:
        fits = S_ISREG(st.st_mode) or (is_dir and c.name[-5:] == ".ckpt")
    if not fits:
        return "not a checkpoint name"
    return c._replace(is_dir=is_dir)


def _link_reason(path: str, root: str) -> str:
    if not os.path.exists(path):  # noqa: PTH110 - a str path
        return "a broken symlink, or a symlink loop"
    if not real_inside(path, root):
        return "a symlink to outside the checkpoint folder"
    return "a symlink: never a checkpoint of its own (what it leads to is judged by its own name)"


def _scan(folder: Path) -> _Scan:
    """Every candidate looked at (its kind, where it leads), and what was ignored and why."""
    at = _open_folder(folder)
    try:
        names, own, others, beside = _read(folder, at)
    finally:
        os.close(at)
    named = [_own(folder, name) for name in own] + [_candidate(folder, c) for c in others]
    root = os.path.realpath(folder)
    scan = _Scan([], beside, [])
    for c in named:
        fit = _fit(c, root)
        if isinstance(fit, str):
            scan.ignored.append(Ignored(c.name, fit))
        else:
            scan.candidates.append(fit)
    seen = {c.name for c in named}
    for name in names:
        if name in seen or name[0] == "." or name in (LIGHTNING_LOGS, TORCHTITAN_FOLDER):
            continue  # hidden: in-flight commits and other hidden files
        if name in (DEEPSPEED_TAG, MEGATRON_TRACKER) and (folder / name).is_file():
            continue
        if name.endswith(NEMO_UNFINISHED):
            what = name[: -len(NEMO_UNFINISHED)]
            scan.ignored.append(Ignored(name, f"NeMo's mark that {what} is unfinished"))
            continue
        scan.ignored.append(Ignored(name, "not a checkpoint name"))
    return scan


_STEP = operator.itemgetter(0)
LIGHTNING_LOGS = "lightning_logs"


def _lightning(logs: Path) -> list[_Named]:
    """Lightning's default layout: ``lightning_logs/version_N/checkpoints/*.ckpt``
    (entries that cannot be checkpoints are left out here, silently). No link is followed
    at any level: ``lightning_logs``, ``version_N`` and ``checkpoints`` must be folders
    of the checkpoint folder itself, and a ``.ckpt`` link is never a checkpoint."""
    ckpt_name = _ANY_NAME.fullmatch
    found: list[_Named] = []
    if not _real_dir(logs):
        return found
    try:
        versions = [
            v
            for v in os.scandir(logs)
            if v.name.startswith("version_") and v.is_dir(follow_symlinks=False)
        ]
    except OSError:
        return found
    for version in versions:
        checkpoints = Path(version.path) / "checkpoints"
        if not _real_dir(checkpoints):
            continue
        try:
            entries = list(os.scandir(checkpoints))
        except OSError:
            continue
        for entry in entries:
            name = entry.name
            m = ckpt_name(name) if name[-5:] == ".ckpt" else None
            if m is None:
                continue
            try:
                ok = entry.is_dir(follow_symlinks=False) or entry.is_file(follow_symlinks=False)
            except OSError:
                continue
            if not ok:
                continue
            group = m.lastindex
            step = None if group is None else int(m[group])
            found.append((step, f"{LIGHTNING_LOGS}/{version.name}/checkpoints/{name}", group))
    return found


_TITAN_STEP = re.compile(r"step-(\d{1,18})", re.ASCII).fullmatch


def _torchtitan(folder: Path) -> list[_Named]:
    """torchtitan's layout: ``checkpoint/step-N`` (``_create_checkpoint_id``), each a
    torch.distributed.checkpoint save (its loader takes one with ``.metadata``). Below
    this folder a step-N is torchtitan's, not slurmpre's: judged as DCP at any width.
    The ``checkpoint`` folder must be the checkpoint folder's own, not a link."""
    if not _real_dir(folder):
        return []
    try:
        names = os.listdir(folder)  # noqa: PTH208 - names only
    except OSError:
        return []
    found: list[_Named] = []
    for name in names:
        m = _TITAN_STEP(name)
        if m is not None:
            found.append((int(m[1]), f"{TORCHTITAN_FOLDER}/{name}", STEP_NAME))
    return found


def _real_dir(path: Path) -> bool:
    """A folder, itself, not a link to one."""
    try:
        return S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


_C = TypeVar("_C", _Named, _Candidate)


def _order(candidates: list[_C], folder: Path) -> list[_C]:
    """Newest first: by step; for one step in two spellings, slurmpre's own
    ``step-NNNNNNNN`` first, then by name; those without a step after, newest mtime first.
    (A candidate's first three fields are its step, name and grammar group.)"""
    # Sorted by the step alone (ints compare fastest); stable, and ties are put in
    # order below.
    stepped = sorted([c for c in candidates if c[0] is not None], key=_STEP, reverse=True)
    # Ties are rare: fix their order afterwards rather than build a key per candidate.
    steps = list(map(_STEP, stepped))
    i = 0 if len(set(steps)) < len(steps) else len(steps)
    while i < len(stepped):
        j = i + 1
        while j < len(stepped) and stepped[j][0] == stepped[i][0]:
            j += 1
        if j - i > 1:
            stepped[i:j] = sorted(
                stepped[i:j], key=lambda c: (c[2] == SLURMPRE_NAME, c[1]), reverse=True
            )
        i = j
    unstepped = [c for c in candidates if c[0] is None]

    def mtime(c: _C) -> float:
        try:
            return os.stat(f"{folder}{os.sep}{c[1]}").st_mtime  # noqa: PTH116 - a str path
        except OSError:
            return 0.0

    return stepped + numbered_order(sorted(unstepped, key=mtime, reverse=True), lambda c: c[1])


_T = TypeVar("_T")


def numbered_order(newest_first: list[_T], name: Callable[[_T], str]) -> list[_T]:
    """``newest_first`` (by the files' times), with each family of numbered names put in
    the order of their numbers in the places that family holds: ``hpc_ckpt_10`` is newer
    than ``hpc_ckpt_9`` whatever their files' times say (a copy or a restore changes them)."""
    out = list(newest_first)
    families: dict[str, list[int]] = {}
    for i, c in enumerate(out):
        numbered = number_of(name(c))
        if numbered is not None:
            families.setdefault(numbered[0], []).append(i)
    for places in families.values():
        members = sorted((out[i] for i in places), key=lambda c: number_of(name(c)) or ("", 0, 0),
                         reverse=True)  # fmt: skip
        for i, c in zip(places, members, strict=True):
            out[i] = c
    return out
