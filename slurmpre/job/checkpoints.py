"""Checkpoints on the shared folder: find the newest *complete* one, and commit new ones atomically.

The resolver reads the folder once (names only), orders candidates by the step in
their names, and checks completeness only from the newest down until one passes:
a folder newer than that costs one lookup per mark of its layout, so 10,000
checkpoint folders cost one directory read and a few checks, and 10,000 partial
ones in slurmpre's layout 10,000 lookups more. The name says the layout
(docs/login.md has the table). It understands:

- slurmpre's own ``step-NNNNNNNN`` folders (complete: a valid ``.slurmpre-complete``
  marker whose manifest matches the files; only slurmpre's commit makes one, and a
  folder by that name without it is partial, whatever else it holds),
- torch.distributed.checkpoint folders by other step names (complete: ``.metadata``
  names shard files that are there),
- Hugging Face Trainer ``checkpoint-N`` folders (complete: ``trainer_state.json``
  parses and model weights are there),
- DeepSpeed ``global_stepN`` folders under a ``latest`` tag file (complete: the
  tag's folder exists with files; folders newer than the tag are unfinished),
- Lightning ``.ckpt`` files (complete: a whole zip archive, as torch.save writes).
"""

from __future__ import annotations

import contextlib
import json
import operator
import os
import re
import shutil
import time
import zipfile
from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from functools import partial
from itertools import compress, count, filterfalse
from pathlib import Path
from stat import S_ISDIR, S_ISLNK, S_ISREG
from typing import NamedTuple, TypeVar

from slurmpre.access import OWNER, Access, make_dir, make_dirs, set_mode
from slurmpre.atomic import fsync_path, write_atomic
from slurmpre.errors import CheckpointError
from slurmpre.reading import (
    LARGE,
    MEDIUM,
    SMALL,
    open_regular,
    read_regular,
    read_text,
    real_inside,
)

MARKER = ".slurmpre-complete"
DCP_METADATA = ".metadata"
HF_STATE = "trainer_state.json"
# The Trainer's own just-in-time save (transformers >= 5, enable_jit_checkpoint) creates
# this in checkpoint-N before it saves and removes it after.
HF_INCOMPLETE = "checkpoint-is-incomplete.txt"
DEEPSPEED_TAG = "latest"
# Accelerate's save_state writes each process's random states last.
ACCELERATE_RNG = "random_states_0.pkl"
# The names a checkpoint can have, one grammar per layout; anything else is not one.
# The capturing group that matched names the layout, and so the marks of completeness
# to look for inside (_MARKS): one lookup per partial folder in slurmpre's own layout.
# Digits are ASCII digits (re.ASCII): the 8-digit names sort by step as strings.
# A step has at most STEP_DIGITS digits, in every grammar and in check_step alike: a
# step the grammar could not read back would be committed and then never found.
STEP_DIGITS = 18
MAX_STEP = 10**STEP_DIGITS - 1
_D = f"\\d{{1,{STEP_DIGITS}}}"
_DIR_NAME = re.compile(
    rf"step-(\d{{8}}|[1-9]\d{{8,{STEP_DIGITS - 1}}})"  # 1: slurmpre's own name, its commits only
    rf"|global_step({_D})"  # 2: DeepSpeed
    rf"|checkpoint[-_]({_D})"  # 3: Hugging Face checkpoint-N, Accelerate checkpoint_N
    rf"|(?:.*?[-_. ])??step[-_=]?({_D})",  # 4: other step names: DCP's step_N, run-step-N
    re.ASCII,
)
SLURMPRE_NAME, DEEPSPEED_NAME, CHECKPOINT_NAME, STEP_NAME = 1, 2, 3, 4
# Lightning: epoch=1-step=200.ckpt; and without a step, last.ckpt and epoch=3.ckpt.
_CKPT_STEPPED = re.compile(rf"(?:.*[-_])?step=({_D})(?:-v\d+)?\.ckpt", re.ASCII)
_CKPT_UNSTEPPED = re.compile(rf"(?:last|epoch={_D})(?:-v\d+)?\.ckpt", re.ASCII)
# Any name of any layout, in one call; never a hidden one (in-flight commits and the like).
_ANY_NAME = re.compile(
    "(?!\\.)(?:"
    + "|".join(f"(?:{p.pattern})" for p in (_DIR_NAME, _CKPT_STEPPED, _CKPT_UNSTEPPED))
    + ")",
    re.ASCII,
)
# Every grammar holds one of these: a name without costs one C-level search and no more.
_MAYBE = re.compile(r"step|checkpoint|\.ckpt$").search
# In a match of _ANY_NAME, groups 1.._DIR_GROUPS are a folder's step, the next a file's.
_DIR_GROUPS = _DIR_NAME.groups
if (
    _ANY_NAME.groups != _DIR_GROUPS + _CKPT_STEPPED.groups + _CKPT_UNSTEPPED.groups
):  # pragma: no cover
    raise ImportError("checkpoint name grammar: a pattern gained a capturing group")
# What proves a folder of each layout complete, looked for in this order; the first
# found says how the folder is checked. MARKER counts only in slurmpre's own name,
# where its commit (a rename into place) puts it: a folder by another name never
# had one, and one by slurmpre's name is complete only through slurmpre's commit.
_MARKS: dict[int | None, tuple[str, ...]] = {
    SLURMPRE_NAME: (MARKER,),
    STEP_NAME: (DCP_METADATA,),
    CHECKPOINT_NAME: (HF_STATE, ACCELERATE_RNG, DCP_METADATA),
    DEEPSPEED_NAME: (),  # judged against the `latest` tag beside it, when there is one
}
_NO_MARK = {
    group: f"partial: no completion mark ({', '.join(marks) or DEEPSPEED_TAG + ' tag beside it'})"
    for group, marks in _MARKS.items()
}
_RESERVED = (
    f"partial: no {MARKER}; it holds a torch.distributed.checkpoint save, but step-NNNNNNNN "
    "is slurmpre's own name, complete only through its commit: save through "
    "slurmpre.checkpoint(), or name the folder step_N"
)
_HF_WEIGHTS = re.compile(
    r"^(model|pytorch_model|adapter_model|tf_model|flax_model)[^/]*\.(safetensors|bin|pt|h5|msgpack)$"
)
_HF_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
_HF_SHARD = re.compile(r"-\d{5}-of-\d{5}\.")
_DCP_FILE = re.compile(rb"__\d+_\d+\.distcp")


class Format(str, Enum):
    SLURMPRE = "slurmpre"
    DCP = "torch-dcp"
    HF = "hf-trainer"
    DEEPSPEED = "deepspeed"
    LIGHTNING = "lightning"
    ACCELERATE = "accelerate"
    UNKNOWN = "unknown"


class Checkpoint(NamedTuple):
    """One candidate, judged: a tuple of plain values (``ckpt list`` makes one per entry of
    a folder that may hold 10,000, and a frozen dataclass costs twice as much)."""

    where: str  # its path, as a string (a Path each costs more than the whole scan)
    step: int | None
    format: Format
    complete: bool
    reason: str

    @property
    def path(self) -> Path:
        return Path(self.where)

    @property
    def name(self) -> str:
        return self.where.rpartition(os.sep)[2]

    def as_dict(self) -> dict[str, object]:
        return {
            "path": self.where,
            "step": self.step,
            "format": self.format.value,
            "complete": self.complete,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Resolution:
    """The newest complete checkpoint; the newest ones passed over, each judged in full
    (as many as the logs name, SHOWN); and how many more newer ones were passed over."""

    checkpoint: Checkpoint | None
    skipped: tuple[Checkpoint, ...] = field(default=())
    more: int = 0


def step_of(name: str) -> int | None:
    """The step a checkpoint's name gives, by the grammar of its layout (None: no step)."""
    m = _DIR_NAME.fullmatch(name) or _CKPT_STEPPED.fullmatch(name)
    return None if m is None or m.lastindex is None else int(m[m.lastindex])


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


@dataclass(frozen=True)
class Ignored:
    """An entry of the folder that is not a checkpoint, and why (``ckpt list --all``)."""

    name: str
    reason: str


@dataclass
class _Scan:
    candidates: list[_Candidate]
    tag: str | None
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


def _read(folder: Path, at: int) -> tuple[list[str], list[str], list[_Named], str | None]:
    """One directory read: its names; slurmpre's own ``step-NNNNNNNN`` names below step
    10^8, in step order (their string order); every other candidate by name alone; and
    the DeepSpeed tag. Nothing is looked at, and a name no grammar allows costs one
    C-level search: 10,000 junk names cost about what os.listdir does."""
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
    tag = _tag(folder) if DEEPSPEED_TAG in names else None
    if LIGHTNING_LOGS in names:
        others += _lightning(folder / LIGHTNING_LOGS)
    return names, own, others, tag


def _tag(folder: Path) -> str | None:
    """DeepSpeed's ``latest`` tag beside its ``global_stepN`` folders, if it reads as one."""
    try:
        tag = read_text(folder / DEEPSPEED_TAG, SMALL, root=os.path.realpath(folder)).strip()
    except (OSError, UnicodeDecodeError):
        return None
    return tag or None


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
        names, own, others, tag = _read(folder, at)
    finally:
        os.close(at)
    named = [_own(folder, name) for name in own] + [_candidate(folder, c) for c in others]
    root = os.path.realpath(folder)
    scan = _Scan([], tag, [])
    for c in named:
        fit = _fit(c, root)
        if isinstance(fit, str):
            scan.ignored.append(Ignored(c.name, fit))
        else:
            scan.candidates.append(fit)
    seen = {c.name for c in named}
    for name in names:
        if name in seen or name[0] == "." or name == LIGHTNING_LOGS:
            continue  # hidden: in-flight commits and other hidden files
        if name == DEEPSPEED_TAG and (folder / name).is_file():
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

    return stepped + sorted(unstepped, key=mtime, reverse=True)


def _check_marker(path: Path, step: int | None = None) -> tuple[bool, str]:
    """slurmpre's marker: the manifest's files are there with their sizes, inside the
    folder, and the step it was committed as is the step of the folder's name (a copy or
    a rename of another step's folder is not that step's checkpoint)."""
    root = os.path.realpath(path)
    try:
        marker = json.loads(read_text(path / MARKER, LARGE, root=root))
        manifest = marker["files"]
        if not isinstance(manifest, dict):
            raise TypeError
    except (OSError, ValueError, KeyError, TypeError):
        return False, f"corrupt: {MARKER} is unreadable"
    marked = marker.get("step")
    if step is not None and marked != step:
        return False, f"corrupt: its {MARKER} is of step {marked!r}, not {step}"
    for rel, size in manifest.items():
        if not _relative(rel):
            return False, f"corrupt: the marker names {rel!r}, which is not inside the folder"
        actual = _size(path / rel, root)
        if actual < 0:
            return False, f"corrupt: {rel} is missing"
        if actual != size:
            return False, f"corrupt: {rel} is {actual} bytes, the marker says {size}"
    return True, f"committed by slurmpre ({len(manifest)} files)"


def _relative(rel: object) -> bool:
    """A path that stays below the folder it is relative to, by its spelling."""
    if not isinstance(rel, str) or not rel or rel.startswith("/") or "\0" in rel:
        return False
    return ".." not in rel.split("/")


def _zip_complete(path: Path, root: str | None = None) -> tuple[bool, str]:
    """A Lightning/torch.save checkpoint: a zip archive that opens and holds a data.pkl.
    Only a regular file is opened (inside ``root``, a realpath, when given)."""
    try:
        with open_regular(path, root=root) as fh, zipfile.ZipFile(fh) as archive:
            names = archive.namelist()
    except (OSError, zipfile.BadZipFile, ValueError, EOFError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        return False, f"partial or corrupt: not a zip archive that opens ({why})"
    if not any(n == "data.pkl" or n.endswith("/data.pkl") for n in names):
        return False, "corrupt: the archive holds no data.pkl"
    return True, "a torch zip archive that opens"


def _size(path: Path, root: str) -> int:
    """The size of a regular file in a checkpoint, or -1: missing, not a regular file, or
    a link that leads out of the checkpoint (``root``, a realpath)."""
    try:
        st = os.lstat(path)
        if S_ISLNK(st.st_mode):
            if not real_inside(path, root):
                return -1
            st = path.stat()
    except OSError:
        return -1
    return st.st_size if S_ISREG(st.st_mode) else -1


def _check_dcp(path: Path) -> tuple[bool, str]:
    """``.metadata`` names the shard files (as pickled strings); every one must be there."""
    root = os.path.realpath(path)
    try:
        meta = read_regular(path / DCP_METADATA, LARGE, root=root)
    except FileNotFoundError:
        return False, "partial: .metadata is not written"
    except OSError as exc:
        return False, f"corrupt: .metadata cannot be read ({exc.strerror})"
    if not meta:
        return False, "corrupt: .metadata is empty"
    named = sorted({m.decode() for m in _DCP_FILE.findall(meta)})
    if not named:
        return False, "corrupt: .metadata names no shard file"
    missing = [n for n in named if _size(path / n, root) <= 0]
    if missing:
        return False, f"partial: {missing[0]} is missing or empty ({len(named)} shards named)"
    return True, f".metadata and its {len(named)} shard file(s) written"


def _check_hf(path: Path, names: set[str]) -> tuple[bool, str]:
    try:
        json.loads(read_text(path / HF_STATE, LARGE, root=os.path.realpath(path)))
    except (OSError, ValueError):
        return False, f"corrupt: {HF_STATE} does not parse"
    return _with_weights(path, names, f"next to {HF_STATE}", f"{HF_STATE} and {{}} written")


_ACCELERATE_RNG = re.compile(r"random_states_(\d+)\.pkl")
# Under FSDP with sharded state dicts, the Trainer and Accelerate write the weights as a
# torch.distributed.checkpoint folder per model: pytorch_model_fsdp_0/.
_FSDP_DIR = re.compile(r"pytorch_model_fsdp_\d+")
# ... and the optimizer's state beside it, also a DCP folder: optimizer_0/.
_FSDP_OPTIM_DIR = re.compile(r"optimizer_\d+")


def _check_ds_tag(path: Path, names: set[str] | None = None) -> tuple[bool, str] | None:
    """DeepSpeed's save_checkpoint inside ``path``: ``latest`` names a tag folder of
    ``*model_states.pt`` files, and is written after them. None: not DeepSpeed's."""
    if names is not None and DEEPSPEED_TAG not in names:
        return None
    try:
        tag = read_text(path / DEEPSPEED_TAG, SMALL, root=os.path.realpath(path)).strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError):
        return False, f"corrupt: '{DEEPSPEED_TAG}' cannot be read"
    if not tag or "/" in tag or tag in (".", ".."):
        return False, f"corrupt: '{DEEPSPEED_TAG}' names no tag folder"
    return _check_ds_folder(path / tag, f"'{DEEPSPEED_TAG}' names {tag}, which")


_DS_ZERO_RANK = re.compile(r"zero_pp_rank_(\d+)_mp_rank_\d+_(model|optim)_states\.pt")


def _check_ds_folder(folder: Path, which: str = "it") -> tuple[bool, str]:
    """One DeepSpeed save (``global_stepN/``): its model states, and with ZeRO each
    process's optimizer shard (``zero_pp_rank_R_...``), ranks 0 to N-1, each a whole
    torch zip."""
    if not _real_dir(folder):
        return False, f"partial: {which} is not a folder of its own (a link, or missing)"
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return False, f"partial: {which} cannot be read"
    root = os.path.realpath(folder)
    name = folder.name
    states = [e for e in entries if e.name.endswith("model_states.pt")]
    if not states:
        return False, f"partial: {name} holds no *model_states.pt"
    ranks: dict[str, set[int]] = {"model": set(), "optim": set()}
    for e in entries:
        if m := _DS_ZERO_RANK.fullmatch(e.name):
            ranks[m[2]].add(int(m[1]))
    for kind, got in ranks.items():
        if got and got != set(range(len(got))):
            return False, f"partial: {name} has the ZeRO {kind} shards of ranks {sorted(got)}"
    if ranks["model"] and ranks["optim"] and ranks["model"] != ranks["optim"]:
        return False, f"partial: {name} has model and optimizer shards of other ranks"
    # Process 0 writes `latest` once its own files are written, not after the others':
    # another process's shard can still be half written. Each is a torch zip, whose
    # directory is written last.
    for e in sorted(entries, key=lambda e: e.name):
        if e.name.endswith("_states.pt") and not _zip_complete(Path(e.path), root)[0]:
            return False, f"partial: {name}/{e.name} is not a whole torch zip archive"
    zero = f", ZeRO shards of {len(ranks['optim'])} process(es)" if ranks["optim"] else ""
    return True, f"DeepSpeed tag {name} with {len(states)} model state file(s){zero}"


def _check_fsdp(path: Path, names: set[str]) -> tuple[bool, str] | None:
    """FSDP-sharded weights (``pytorch_model_fsdp_N/``) and optimizer state
    (``optimizer_N/``), each a complete DCP folder."""
    folders = sorted(n for n in names if _FSDP_DIR.fullmatch(n))
    if not folders:
        return None
    optimizers = sorted(n for n in names if _FSDP_OPTIM_DIR.fullmatch(n) and _real_dir(path / n))
    for name in folders + optimizers:
        if not _real_dir(path / name):
            return False, f"{name}: not a folder of its own (a link, or a file)"
        ok, why = _check_dcp(path / name)
        if not ok:
            return False, f"{name}: {why}"
    optim = f" and optimizer state in {', '.join(optimizers)}" if optimizers else ""
    return True, f"FSDP-sharded weights in {', '.join(folders)}{optim}"


def _weights(path: Path, names: set[str]) -> tuple[bool, str] | None:
    """The model weights of a Trainer or Accelerate folder, by the first layout present:
    an index and its shards, FSDP-sharded folders, DeepSpeed's tag, or weight files."""
    root = os.path.realpath(path)
    for index_name in _HF_INDEXES:
        if index_name in names:
            try:
                weight_map = json.loads(read_text(path / index_name, MEDIUM, root=root))[
                    "weight_map"
                ]
                shards = sorted(set(weight_map.values()))
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                return False, f"corrupt: {index_name} does not parse"
            missing = [s for s in shards if not _relative(s) or _size(path / str(s), root) <= 0]
            if not shards or missing:
                what = missing[0] if missing else "no shard"
                return False, f"partial: {what} of the {len(shards)} in {index_name}"
            return True, f"{len(shards)} weight shards"
    for layout in (_check_fsdp(path, names), _check_ds_tag(path, names)):
        if layout is not None:
            return layout
    weights = [n for n in names if _HF_WEIGHTS.match(n)]
    if not weights:
        return None
    if any(_HF_SHARD.search(n) for n in weights):
        return False, "partial: sharded weights without their index"
    empty = [n for n in sorted(weights) if _size(path / n, root) <= 0]
    if empty:
        return False, f"partial: {empty[0]} is empty"
    return True, "weights"


def _check_accelerate(path: Path, names: set[str]) -> tuple[bool, str]:
    """Accelerate's save_state: weights first, each process's random states last."""
    ranks = sorted(int(m[1]) for n in names if (m := _ACCELERATE_RNG.fullmatch(n)))
    if ranks != list(range(len(ranks))):
        return False, f"partial: random_states of processes {ranks} (a gap)"
    root = os.path.realpath(path)
    empty = [
        f"random_states_{r}.pkl" for r in ranks if _size(path / f"random_states_{r}.pkl", root) <= 0
    ]
    if empty:
        return False, f"partial: {empty[0]} is empty"
    return _with_weights(
        path, names, "beside the random states", f"save_state of {len(ranks)} process(es): {{}}"
    )


def _with_weights(path: Path, names: set[str], where: str, complete: str) -> tuple[bool, str]:
    """The folder's verdict from its weights: ``complete`` says what was found."""
    weights = _weights(path, names)
    if weights is None:
        return False, f"partial: no model weights {where}"
    ok, why = weights
    return ok, (complete.format(why) if ok else why)


def _marked(path: Path, mark: str, step: int | None) -> tuple[Format, bool, str]:
    """A folder checked by the rule of the first mark found in it."""
    if mark == MARKER:
        return (Format.SLURMPRE, *_check_marker(path, step))
    if mark == DCP_METADATA:
        return (Format.DCP, *_check_dcp(path))
    names = set(os.listdir(path))  # noqa: PTH208
    if mark == HF_STATE:  # only the Trainer writes it, into its checkpoint-N
        return (Format.HF, *_check_hf(path, names))
    return (Format.ACCELERATE, *_check_accelerate(path, names))  # save_state: checkpoint_N


def _check_dir(
    path: str, name: str, group: int | None, ds_tag: str | None, ds_tag_step: int | None
) -> tuple[Format, bool, str]:
    """A folder's verdict by its layout (the grammar group its name matched)."""
    # `latest` looks for the same marks inline on its hot path, from the same table, and
    # sends here only the folders in which it found one.
    inside = path + os.sep
    if group == CHECKPOINT_NAME and os.access(inside + HF_INCOMPLETE, os.F_OK):
        return Format.HF, False, f"partial: {HF_INCOMPLETE} is there (the Trainer is saving)"
    for mark in _MARKS.get(group, ()):
        if os.access(inside + mark, os.F_OK):
            return _marked(Path(path), mark, step_of(name) if group == SLURMPRE_NAME else None)
    # Lightning's DeepSpeed strategy saves a `.ckpt` folder: DeepSpeed's tag inside.
    if name[-5:] == ".ckpt":
        ds = _check_ds_tag(Path(path))
        if ds is not None:
            return (Format.LIGHTNING, *ds)
        return Format.LIGHTNING, False, f"partial: no '{DEEPSPEED_TAG}' tag inside"
    if group == DEEPSPEED_NAME and ds_tag is not None:
        step = step_of(name)
        if name == ds_tag or (step is not None and ds_tag_step is not None and step < ds_tag_step):
            ok, why = _check_ds_folder(Path(path))
            if ok:
                why = f"{why}, at or before the '{DEEPSPEED_TAG}' tag {ds_tag}"
            return Format.DEEPSPEED, ok, why
        return Format.DEEPSPEED, False, f"newer than the '{DEEPSPEED_TAG}' tag {ds_tag}: unfinished"
    if group == SLURMPRE_NAME and os.access(inside + DCP_METADATA, os.F_OK):
        return Format.DCP, False, _RESERVED
    return Format.UNKNOWN, False, _NO_MARK.get(group, "partial: no completion mark")


def _judge(c: _Candidate, ds_tag: str | None, ds_step: int | None) -> Checkpoint:
    """A candidate whose kind is known (see _fit), judged."""
    if not c.is_dir:
        ok, why = _zip_complete(Path(c.path), os.path.realpath(Path(c.path).parent))
        return Checkpoint(c.path, c.step, Format.LIGHTNING, ok, why)
    try:
        fmt, ok, why = _check_dir(c.path, c.name, c.group, ds_tag, ds_step)
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
# slurmpre's own names below step 10^8: eight digits, so their string order is their steps'.
_OWN = re.compile(r"step-\d{8}", re.ASCII).fullmatch
_OWN_LIMIT = 10**8


def _newer(c: _Named) -> int:
    """An ascending key for the order of _order: minus the step; stepless ones last."""
    return MAX_STEP + 1 if c[0] is None else -c[0]


def latest(folder: Path | str) -> Resolution:
    """The newest complete checkpoint under ``folder`` (None if there is none)."""
    folder = Path(folder)
    at = _open_folder(folder)
    try:
        names, own, others, tag = _read(folder, at)
        resolve = _Resolve(folder, at, tag)
        missing = _deepspeed_target_missing(folder, tag, names)
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

    def __init__(self, folder: Path, at: int, tag: str | None) -> None:
        self.folder, self.at, self.tag = folder, at, tag
        self.root = os.path.realpath(folder)
        self.ds_step = step_of(tag) if tag else None
        self.lookups = _LOOKUPS if tag is None else _LOOKUPS_TAGGED
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
            self.shown.append(_judge(fit, self.tag, self.ds_step))

    def judged(self, c: _Candidate) -> Checkpoint | None:
        """A candidate with a mark, or with none to look for: complete, or passed over."""
        fit = _fit(c, self.root)
        if isinstance(fit, str):
            return None  # not a checkpoint after all, as `ckpt list --all` says
        judged = _judge(fit, self.tag, self.ds_step)
        if judged.complete:
            return judged
        if len(self.shown) < SHOWN:
            self.shown.append(judged)
        else:
            self.more += 1
        return None


def findable(folder: Path | str, path: Path | str) -> bool:
    """Would the resolver look at ``path`` when it scans ``folder``? (Its top level, and
    Lightning's ``lightning_logs/version_N/checkpoints/``.)"""
    try:
        rel = Path(path).resolve().relative_to(Path(folder).resolve())
    except ValueError:
        return False
    parts = rel.parts
    return len(parts) == 1 or (
        len(parts) == 4
        and parts[0] == LIGHTNING_LOGS
        and parts[1].startswith("version_")
        and parts[2] == "checkpoints"
    )


def judge(path: Path | str) -> Checkpoint:
    """One checkpoint (a folder or a Lightning file), judged as the resolver would, from
    the folder that holds it (its parent; for Lightning's default layout the folder above
    ``lightning_logs``): a link anywhere below that folder makes it no checkpoint."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{str(path)!r} does not exist")
    if not (path.is_dir() or path.is_file()):
        raise CheckpointError(f"{str(path)!r} is neither a folder nor a file")
    m = _ANY_NAME.fullmatch(path.name)
    if m is None:
        return Checkpoint(str(path), None, Format.UNKNOWN, False, "not a checkpoint name")
    group = m.lastindex
    step = None if group is None else int(m[group])
    home = _home(path)
    between = path.parents[: len(path.relative_to(home).parts) - 1]
    if not all(map(_real_dir, between)):
        why = "a link on the way to it: where it leads is not in the checkpoint folder's own tree"
        return Checkpoint(str(path), step, Format.UNKNOWN, False, why)
    fit = _fit(_Candidate(step, path.name, group, str(path), None), os.path.realpath(home))
    if isinstance(fit, str):
        return Checkpoint(str(path), step, Format.UNKNOWN, False, fit)
    tag = _tag(path.parent)
    return _judge(fit, tag, step_of(tag) if tag else None)


def _home(path: Path) -> Path:
    """The checkpoint folder the resolver would find ``path`` in, by its spelling."""
    parts = path.parts
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
    ds_step = step_of(scan.tag) if scan.tag else None
    out = [_judge(c, scan.tag, ds_step) for c in _order(scan.candidates, folder)]
    names = [c.name for c in scan.candidates] + [i.name for i in scan.ignored]
    missing = _deepspeed_target_missing(folder, scan.tag, names)
    return ([missing] if missing else []) + out


def ignored(folder: Path | str) -> list[Ignored]:
    """What in ``folder`` is not a checkpoint, and why."""
    return sorted(_scan(Path(folder)).ignored, key=lambda i: i.name)


def summarize(found: Resolution) -> list[str]:
    """'passing over' lines for the ones judged in full; one summary line for the rest."""
    lines = [f"passing over {s.name}: {s.reason}" for s in found.skipped]
    if found.more:
        lines.append(f"... and {found.more} more newer ones that are not complete")
    return lines


# -- committing ------------------------------------------------------------------
def step_dir_name(step: int) -> str:
    return f"step-{step:08d}"


def check_step(step: object) -> int:
    """A checkpoint's step: a whole number, 0 or more (not a bool, not a float or string)."""
    if isinstance(step, bool) or not isinstance(step, int):
        raise CheckpointError(f"checkpoint step must be a whole number, got {step!r}")
    if step < 0:
        raise CheckpointError(f"checkpoint step must be 0 or more, got {step}")
    if step > MAX_STEP:
        raise CheckpointError(
            f"checkpoint step must be at most {MAX_STEP} ({STEP_DIGITS} digits, the most a "
            f"checkpoint's name can hold and be found again), got {step}"
        )
    return step


def _safe(tag: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", tag)


def incoming_path(folder: Path, step: int, attempt_tag: str) -> Path:
    """Where a checkpoint is written before it is committed: hidden, so never resolved."""
    return folder / f".incoming-{step_dir_name(step)}-{_safe(attempt_tag)}"


def sync_path(incoming: Path) -> Path:
    """Beside an in-flight checkpoint: each rank's done/abort mark, and rank 0's verdict."""
    return incoming.with_name(f".sync{incoming.name}")


def fresh_incoming(folder: Path, step: int, attempt_tag: str, access: Access = OWNER) -> Path:
    """An empty in-flight folder; leftovers of an earlier try are set aside, not reused."""
    incoming = incoming_path(folder, step, attempt_tag)
    if incoming.exists():
        incoming.rename(incoming.with_name(f"{incoming.name}.stale-{time.time_ns()}"))
    make_dirs(folder, access)
    make_dir(incoming, access)
    return incoming


def commit(
    incoming: Path, folder: Path, step: int, *, now: float | None = None, access: Access = OWNER
) -> Path:
    """Seal ``incoming`` as the complete checkpoint of ``step`` and move it into place.

    Files are fsynced, a marker with their sizes is written, then one rename
    publishes the folder: a kill at any instant leaves either the previous
    state or a complete new checkpoint. An existing *complete* checkpoint of the
    same step is never replaced (ours is dropped instead); a partial one left
    by a killed attempt is moved aside, not deleted. A checkpoint with no file
    in it is refused: it would become "latest" with nothing to resume from.
    The published folder has the access's mode (0700 by default), so only its
    owner can read the weights, whatever the umask was when they were written.
    """
    check_step(step)
    if not incoming.is_dir():
        raise CheckpointError(f"nothing was written to {str(incoming)!r}")
    manifest: dict[str, int] = {}
    for root, dirs, files in os.walk(incoming):
        dirs.sort()
        for name in sorted(files):
            full = Path(root) / name
            rel = full.relative_to(incoming).as_posix()
            if rel == MARKER:
                continue
            fsync_path(full)
            manifest[rel] = full.stat().st_size
        fsync_path(Path(root), directory=True)
    if not manifest:
        raise CheckpointError(
            f"the checkpoint of step {step} is empty: nothing was written to {str(incoming)!r}"
        )
    marker = incoming / MARKER
    stamp = time.time() if now is None else now
    text = json.dumps({"step": step, "committed_at": stamp, "files": manifest}, sort_keys=True)
    write_atomic(marker, text + "\n", mode=access.file_mode)
    set_mode(incoming, access.dir_mode)
    fsync_path(incoming, directory=True)
    return _publish(incoming, folder, step, stamp)


def _publish(sealed: Path, folder: Path, step: int, stamp: float) -> Path:
    final = folder / step_dir_name(step)
    if final.is_symlink():
        # A link by this name is no checkpoint (the resolver never takes one), whatever
        # it leads to: set the link itself aside (what it leads to is not touched).
        final.rename(folder / f".partial-{final.name}-{int(stamp * 1000)}")
    elif final.exists():
        ok, _ = _check_marker(final, step) if (final / MARKER).exists() else (False, "")
        if ok:
            # Already committed (a periodic and a just-in-time save of one step):
            # keep the one that was there, set ours aside.
            aside = folder / f".duplicate-{final.name}-{int(stamp * 1000)}"
            sealed.rename(aside)
            return final
        final.rename(folder / f".partial-{final.name}-{int(stamp * 1000)}")
    sealed.rename(final)
    fsync_path(folder, directory=True)
    return final


@contextlib.contextmanager
def writing(
    folder: Path, step: int, attempt_tag: str = "local", access: Access = OWNER
) -> Iterator[Path]:
    """Single-process commit: yield a fresh folder to write into, commit it on success."""
    check_step(step)
    incoming = fresh_incoming(folder, step, attempt_tag, access)
    yield incoming
    commit(incoming, folder, step, access=access)


# -- leftovers of dead attempts ------------------------------------------------------
# Hidden folders slurmpre itself leaves: in-flight (with the attempt tag that wrote
# them), their sync marks, stale tries, partial and duplicate steps set aside, and
# what `ckpt prune` renamed but did not get to delete. Shared with prune.
LEFTOVER = re.compile(
    r"^\.(?:sync)?\.?incoming-step-(?P<step>\d+)-(?P<tag>[A-Za-z0-9_.-]+?)(?:\.stale-\d+)?$"
    r"|^\.(?:partial|duplicate)-step-\d+-\d+$"
    r"|^\.pruned-.+$"  # what `ckpt prune` set aside and did not get to delete
)


@dataclass(frozen=True)
class Cleaned:
    removed: tuple[str, ...]
    published: tuple[str, ...]  # sealed commits a kill interrupted just before the rename


def clean_leftovers(folder: Path, *, live: str) -> Cleaned:
    """Remove what dead attempts left in ``folder``: in-flight, stale, partial and duplicate
    folders, and their sync marks. ``live`` is the attempt-tag prefix of the attempt that
    is starting (its own folders are kept).

    Never touches a complete checkpoint: a leftover that was sealed (a valid
    marker) but not yet renamed is published instead, when its step has no
    checkpoint yet; only hidden folders with slurmpre's own names are removed.
    """
    removed: list[str] = []
    published: list[str] = []
    live_prefix = _safe(live)
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return Cleaned((), ())
    for entry in entries:
        m = LEFTOVER.match(entry.name)
        if m is None or not entry.is_dir(follow_symlinks=False):
            continue
        tag = m.group("tag")
        if tag is not None and tag.startswith(live_prefix):
            continue
        path = Path(entry.path)
        is_incoming = tag is not None and not entry.name.startswith(".sync")
        if is_incoming and ".stale-" not in entry.name and (path / MARKER).exists():
            step = int(m.group("step"))
            ok, _ = _check_marker(path, step)
            if ok and not (folder / step_dir_name(step)).exists():
                with contextlib.suppress(OSError):
                    published.append(str(_publish(path, folder, step, time.time())))
                    continue
        with contextlib.suppress(OSError):
            shutil.rmtree(path)
            removed.append(entry.name)
    return Cleaned(tuple(removed), tuple(published))
