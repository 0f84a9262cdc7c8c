"""Checkpoints on the shared folder: find the newest *complete* one, and commit new ones atomically.

The resolver reads the folder once (names and entry types, no stat per entry),
orders candidates by the step in their names, and checks completeness only
from the newest down until one passes, so 10,000 checkpoint folders cost one
directory read and a few checks. It understands:

- slurmpre's own ``step-N`` folders (complete: a valid ``.slurmpre-complete``
  marker whose manifest matches the files),
- torch.distributed.checkpoint folders (complete: ``.metadata`` exists, non-empty),
- Hugging Face Trainer ``checkpoint-N`` folders (complete: ``trainer_state.json``
  parses and model weights are there),
- DeepSpeed ``global_stepN`` folders under a ``latest`` tag file (complete: the
  tag's folder exists with files; folders newer than the tag are unfinished),
- Lightning ``.ckpt`` files (complete: a whole zip archive, as torch.save writes).
"""

from __future__ import annotations

import contextlib
import errno
import json
import operator
import os
import re
import shutil
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import NamedTuple

from slurmpre.access import OWNER, Access, make_dir, make_dirs, set_mode
from slurmpre.atomic import write_atomic
from slurmpre.errors import CheckpointError

MARKER = ".slurmpre-complete"
DCP_METADATA = ".metadata"
HF_STATE = "trainer_state.json"
DEEPSPEED_TAG = "latest"
# The names a checkpoint can have, one grammar per layout; anything else is not one.
# One alternation, so 10,000 junk names cost one regex call each.
_DIR_NAME = re.compile(
    r"(?:.*[-_. ])?step[-_=]?(\d{1,18})"  # slurmpre step-N, DCP step_N, ...
    r"|checkpoint[-_](\d{1,18})"  # Hugging Face checkpoint-N, Accelerate checkpoint_N
    r"|global_step(\d{1,18})"  # DeepSpeed
)
_CKPT_STEPPED = re.compile(r"(?:.*[-_])?step=(\d{1,18})(?:-v\d+)?\.ckpt")  # epoch=1-step=200.ckpt
_CKPT_UNSTEPPED = re.compile(r"(?:last|epoch=\d{1,18})(?:-v\d+)?\.ckpt")  # last.ckpt, epoch=3.ckpt
# Any name of any layout, in one call: a junk name costs one regex call, no more.
_ANY_NAME = re.compile(
    "|".join(f"(?:{p.pattern})" for p in (_DIR_NAME, _CKPT_STEPPED, _CKPT_UNSTEPPED))
    + f"|{DEEPSPEED_TAG}"
)
# In a match of _ANY_NAME, groups 1.._DIR_GROUPS are a folder's step, the next a file's.
_DIR_GROUPS = _DIR_NAME.groups
if (
    _ANY_NAME.groups != _DIR_GROUPS + _CKPT_STEPPED.groups + _CKPT_UNSTEPPED.groups
):  # pragma: no cover
    raise ImportError("checkpoint name grammar: a pattern gained a capturing group")
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
    """One candidate, judged. A tuple of plain values: 10,000 partial folders newer than
    the last complete one each become one, and a frozen dataclass costs twice as much."""

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
    """The newest complete checkpoint, and the newer ones passed over (with why)."""

    checkpoint: Checkpoint | None
    skipped: tuple[Checkpoint, ...] = field(default=())


def step_of(name: str) -> int | None:
    """The step a checkpoint's name gives, by the grammar of its layout (None: no step)."""
    m = _DIR_NAME.fullmatch(name) or _CKPT_STEPPED.fullmatch(name)
    return None if m is None or m.lastindex is None else int(m[m.lastindex])


def canonical(name: str, step: int | None) -> bool:
    """slurmpre's own spelling of a step (``step-00000010``), which wins a tie."""
    return step is not None and name == step_dir_name(step)


# A NamedTuple's own constructor is Python code; tuple.__new__ builds the same object
# in C. Used where 10,000 of them are made in one call.
_new = tuple.__new__


class _Candidate(NamedTuple):
    # A tuple of plain values, the step first (the sort key): 10,000 pathlib objects
    # (or frozen dataclasses) cost more than the scan itself.
    step: int | None
    name: str
    path: str
    is_dir: bool


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


def _inside(path: str, root: str) -> bool:
    real = os.path.realpath(path)
    return real == root or real.startswith(root + os.sep)


def _scan(folder: Path, *, keep_ignored: bool = True) -> _Scan:
    """One directory read: candidates by name, the DeepSpeed tag, and what was ignored.

    Names are matched first: a name no layout's grammar allows costs one regex call
    and nothing else (``keep_ignored=False`` does not even record it).
    """
    scan = _Scan([], None, [])
    try:
        entries = os.scandir(folder)
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint folder {str(folder)!r} does not exist") from None
    except NotADirectoryError:
        raise CheckpointError(f"checkpoint folder {str(folder)!r} is not a folder") from None
    except PermissionError:
        raise CheckpointError(f"checkpoint folder {str(folder)!r} cannot be read") from None
    except OSError as exc:
        raise CheckpointError(f"checkpoint folder {str(folder)!r}: {exc.strerror}") from None
    root = os.path.realpath(folder)
    any_name = _ANY_NAME.fullmatch
    ignored = scan.ignored.append if keep_ignored else (lambda _: None)
    add = scan.candidates.append
    with entries:
        for entry in entries:
            name = entry.name
            if name[0] == ".":
                continue  # our own in-flight commits, and other hidden files
            if name == LIGHTNING_LOGS:
                _scan_lightning(Path(entry.path), root, scan)
                continue
            # Every grammar needs one of these: a cheaper test than the regex for junk.
            m = (
                any_name(name)
                if "step" in name
                or "checkpoint" in name
                or name[-5:] == ".ckpt"
                or name == DEEPSPEED_TAG
                else None
            )
            if m is None:
                if keep_ignored:  # not even a record each for 10,000 junk names
                    ignored(Ignored(name, "not a checkpoint name"))
                continue
            # Which layout's grammar matched: groups 1-3 name folders, 4 a stepped
            # Lightning file; no group, an unstepped Lightning file or the DeepSpeed tag.
            group = m.lastindex
            try:
                linked = entry.is_symlink()  # both from the listing's d_type: no syscall
                is_dir = entry.is_dir()
                is_file = not is_dir and entry.is_file()
            except OSError as exc:
                loop = exc.errno == errno.ELOOP
                ignored(
                    Ignored(
                        name,
                        "a broken symlink, or a symlink loop" if loop else f"cannot be read: {exc}",
                    )
                )
                continue
            if linked and not (is_dir or is_file):
                ignored(Ignored(name, "a broken symlink, or a symlink loop"))
                continue
            if name == DEEPSPEED_TAG:
                if is_file:
                    with contextlib.suppress(OSError, UnicodeDecodeError):
                        scan.tag = Path(entry.path).read_text().strip() or None
                else:
                    ignored(Ignored(name, "not a checkpoint name"))
                continue
            if (
                (is_dir and group is not None and group <= _DIR_GROUPS)
                or (is_file and (group is None or group > _DIR_GROUPS))
                or (is_dir and name[-5:] == ".ckpt")  # Lightning's DeepSpeed checkpoints
            ):
                if linked and not _inside(entry.path, root):
                    ignored(Ignored(name, "a symlink to outside the checkpoint folder"))
                    continue
                step = None if group is None else int(m[group])
                add(_new(_Candidate, (step, name, entry.path, is_dir)))
            else:
                ignored(Ignored(name, "not a checkpoint name"))
    return scan


_STEP = operator.itemgetter(0)
LIGHTNING_LOGS = "lightning_logs"


def _scan_lightning(logs: Path, root: str, scan: _Scan) -> None:
    """Lightning's default layout: ``lightning_logs/version_N/checkpoints/*.ckpt``."""
    ckpt_name = _ANY_NAME.fullmatch
    try:
        versions = [v for v in os.scandir(logs) if v.name.startswith("version_")]
    except OSError:
        return
    for version in versions:
        try:
            entries = list(os.scandir(Path(version.path) / "checkpoints"))
        except OSError:
            continue
        for entry in entries:
            name = entry.name
            m = ckpt_name(name) if name[-5:] == ".ckpt" else None
            if m is None:
                continue
            try:
                is_dir = entry.is_dir()
                ok = is_dir or entry.is_file()
            except OSError:
                continue
            if not ok or (entry.is_symlink() and not _inside(entry.path, root)):
                continue
            group = m.lastindex
            step = None if group is None else int(m[group])
            rel = f"{LIGHTNING_LOGS}/{version.name}/checkpoints/{name}"
            scan.candidates.append(_new(_Candidate, (step, rel, entry.path, is_dir)))


def _order(candidates: list[_Candidate]) -> list[_Candidate]:
    """Newest first: by step; for one step in two spellings, slurmpre's canonical
    ``step-NNNNNNNN`` first, then by name; those without a step after, newest mtime first."""
    # Sorted by the step alone (ints compare fastest); stable, and ties are put in
    # order below.
    stepped = sorted([c for c in candidates if c.step is not None], key=_STEP, reverse=True)
    # Ties are rare: fix their order afterwards rather than format a name per candidate.
    i = 0
    while i < len(stepped):
        j = i + 1
        while j < len(stepped) and stepped[j].step == stepped[i].step:
            j += 1
        if j - i > 1:
            stepped[i:j] = sorted(
                stepped[i:j], key=lambda c: (canonical(c.name, c.step), c.name), reverse=True
            )
        i = j
    unstepped = [c for c in candidates if c.step is None]

    def mtime(c: _Candidate) -> float:
        try:
            return os.stat(c.path).st_mtime  # noqa: PTH116 - a str path on the hot path
        except OSError:
            return 0.0

    return stepped + sorted(unstepped, key=mtime, reverse=True)


def _check_marker(path: Path) -> tuple[bool, str]:
    try:
        marker = json.loads((path / MARKER).read_text())
        manifest = marker["files"]
        if not isinstance(manifest, dict):
            raise TypeError
    except (OSError, ValueError, KeyError, TypeError):
        return False, f"corrupt: {MARKER} is unreadable"
    for rel, size in manifest.items():
        try:
            actual = (path / rel).stat().st_size
        except OSError:
            return False, f"corrupt: {rel} is missing"
        if actual != size:
            return False, f"corrupt: {rel} is {actual} bytes, the marker says {size}"
    return True, f"committed by slurmpre ({len(manifest)} files)"


def _zip_complete(path: Path) -> tuple[bool, str]:
    """A Lightning/torch.save checkpoint: a zip archive that opens and holds a data.pkl."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (OSError, zipfile.BadZipFile, ValueError, EOFError) as exc:
        return False, f"partial or corrupt: not a zip archive that opens ({exc})"
    if not any(n == "data.pkl" or n.endswith("/data.pkl") for n in names):
        return False, "corrupt: the archive holds no data.pkl"
    return True, "a torch zip archive that opens"


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1


def _check_dcp(path: Path) -> tuple[bool, str]:
    """``.metadata`` names the shard files (as pickled strings); every one must be there."""
    try:
        meta = (path / DCP_METADATA).read_bytes()
    except FileNotFoundError:
        return False, "partial: .metadata is not written"
    except OSError as exc:
        return False, f"corrupt: .metadata cannot be read ({exc.strerror})"
    if not meta:
        return False, "corrupt: .metadata is empty"
    named = sorted({m.decode() for m in _DCP_FILE.findall(meta)})
    if not named:
        return False, "corrupt: .metadata names no shard file"
    missing = [n for n in named if _size(path / n) <= 0]
    if missing:
        return False, f"partial: {missing[0]} is missing or empty ({len(named)} shards named)"
    return True, f".metadata and its {len(named)} shard file(s) written"


def _check_hf(path: Path, names: set[str]) -> tuple[bool, str]:
    try:
        json.loads((path / HF_STATE).read_text())
    except (OSError, ValueError):
        return False, f"corrupt: {HF_STATE} does not parse"
    return _with_weights(path, names, f"next to {HF_STATE}", f"{HF_STATE} and {{}} written")


# Accelerate's save_state writes each process's random states last.
ACCELERATE_RNG = "random_states_0.pkl"
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
        tag = (path / DEEPSPEED_TAG).read_text().strip()
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
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return False, f"partial: {which} cannot be read"
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
        if e.name.endswith("_states.pt") and not _zip_complete(Path(e.path))[0]:
            return False, f"partial: {name}/{e.name} is not a whole torch zip archive"
    zero = f", ZeRO shards of {len(ranks['optim'])} process(es)" if ranks["optim"] else ""
    return True, f"DeepSpeed tag {name} with {len(states)} model state file(s){zero}"


def _check_fsdp(path: Path, names: set[str]) -> tuple[bool, str] | None:
    """FSDP-sharded weights (``pytorch_model_fsdp_N/``) and optimizer state
    (``optimizer_N/``), each a complete DCP folder."""
    folders = sorted(n for n in names if _FSDP_DIR.fullmatch(n))
    if not folders:
        return None
    optimizers = sorted(n for n in names if _FSDP_OPTIM_DIR.fullmatch(n) and (path / n).is_dir())
    for name in folders + optimizers:
        ok, why = _check_dcp(path / name)
        if not ok:
            return False, f"{name}: {why}"
    optim = f" and optimizer state in {', '.join(optimizers)}" if optimizers else ""
    return True, f"FSDP-sharded weights in {', '.join(folders)}{optim}"


def _weights(path: Path, names: set[str]) -> tuple[bool, str] | None:
    """The model weights of a Trainer or Accelerate folder, by the first layout present:
    an index and its shards, FSDP-sharded folders, DeepSpeed's tag, or weight files."""
    for index_name in _HF_INDEXES:
        if index_name in names:
            try:
                weight_map = json.loads((path / index_name).read_text())["weight_map"]
                shards = sorted(set(weight_map.values()))
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                return False, f"corrupt: {index_name} does not parse"
            missing = [s for s in shards if _size(path / str(s)) <= 0]
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
    empty = [n for n in sorted(weights) if _size(path / n) <= 0]
    if empty:
        return False, f"partial: {empty[0]} is empty"
    return True, "weights"


def _check_accelerate(path: Path, names: set[str]) -> tuple[bool, str]:
    """Accelerate's save_state: weights first, each process's random states last."""
    ranks = sorted(int(m[1]) for n in names if (m := _ACCELERATE_RNG.fullmatch(n)))
    if ranks != list(range(len(ranks))):
        return False, f"partial: random_states of processes {ranks} (a gap)"
    empty = [f"random_states_{r}.pkl" for r in ranks if _size(path / f"random_states_{r}.pkl") <= 0]
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


_NO_MARK = "partial: no completion mark (.slurmpre-complete, .metadata, trainer_state.json)"


def _check_dir(
    path: str, name: str, ds_tag_step: int | None, ds_tag: str | None
) -> tuple[Format, bool, str]:
    # The marks looked for here are the ones `latest` checks inline on its hot path (a
    # folder with none is passed over there without coming here): keep the two in step.
    inside = path + os.sep
    if os.access(inside + MARKER, os.F_OK):
        return (Format.SLURMPRE, *_check_marker(Path(path)))
    if os.access(inside + DCP_METADATA, os.F_OK):
        return (Format.DCP, *_check_dcp(Path(path)))
    # Only the Trainer writes trainer_state.json, and always into its `checkpoint-N`;
    # Accelerate's save_state writes `checkpoint_N` with its random states last.
    if name.startswith("checkpoint"):
        if os.access(inside + HF_STATE, os.F_OK):
            return (Format.HF, *_check_hf(Path(path), set(os.listdir(path))))  # noqa: PTH208
        if os.access(inside + ACCELERATE_RNG, os.F_OK):
            names = set(os.listdir(path))  # noqa: PTH208
            return (Format.ACCELERATE, *_check_accelerate(Path(path), names))
    # Lightning's DeepSpeed strategy saves a `.ckpt` folder: DeepSpeed's tag inside.
    if name.endswith(".ckpt"):
        ds = _check_ds_tag(Path(path))
        if ds is not None:
            return (Format.LIGHTNING, *ds)
    if ds_tag is not None and name.startswith("global_step"):
        step = step_of(name)
        if name == ds_tag or (step is not None and ds_tag_step is not None and step < ds_tag_step):
            ok, why = _check_ds_folder(Path(path))
            if ok:
                why = f"{why}, at or before the '{DEEPSPEED_TAG}' tag {ds_tag}"
            return Format.DEEPSPEED, ok, why
        return Format.DEEPSPEED, False, f"newer than the '{DEEPSPEED_TAG}' tag {ds_tag}: unfinished"
    return _UNMARKED


_UNMARKED = (Format.UNKNOWN, False, _NO_MARK)


def _judge(c: _Candidate, ds_tag: str | None, ds_step: int | None) -> Checkpoint:
    if not c.is_dir:
        ok, why = _zip_complete(Path(c.path))
        return Checkpoint(c.path, c.step, Format.LIGHTNING, ok, why)
    try:
        fmt, ok, why = _check_dir(c.path, c.name, ds_step, ds_tag)
    except OSError as exc:
        fmt, ok, why = Format.UNKNOWN, False, f"cannot be read: {exc.strerror}"
    return Checkpoint(c.path, c.step, fmt, ok, why)


def _deepspeed_target_missing(
    folder: Path, tag: str | None, candidates: list[_Candidate]
) -> Checkpoint | None:
    if tag is None or any(c.name == tag for c in candidates):
        return None
    return Checkpoint(
        str(Path(folder) / tag),
        step_of(tag),
        Format.DEEPSPEED,
        False,
        f"corrupt: '{DEEPSPEED_TAG}' names {tag}, which does not exist",
    )


def latest(folder: Path | str) -> Resolution:
    """The newest complete checkpoint under ``folder`` (None if there is none)."""
    folder = Path(folder)
    scan = _scan(folder, keep_ignored=False)
    skipped: list[Checkpoint] = []
    missing = _deepspeed_target_missing(folder, scan.tag, scan.candidates)
    if missing is not None:
        skipped.append(missing)
    tag = scan.tag
    ds_step = step_of(tag) if tag else None
    unknown, no_mark = _UNMARKED[0], _UNMARKED[2]
    access, exists = os.access, os.F_OK
    mark, meta, hf = os.sep + MARKER, os.sep + DCP_METADATA, os.sep + HF_STATE
    rng = os.sep + ACCELERATE_RNG
    # Marks are looked up relative to the folder: a shorter path walk per call.
    try:
        at = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise CheckpointError(f"checkpoint folder {str(folder)!r}: {exc.strerror}") from None
    try:
        for cand in _order(scan.candidates):
            # The hot path: 10,000 partial folders newer than the last complete one.
            # A folder with no mark of any layout costs its two or three access(2) calls
            # (they answer without raising); the marks are `_check_dir`'s, in the same order.
            name = cand.name
            if (
                cand.is_dir
                and not access(name + mark, exists, dir_fd=at)
                and not access(name + meta, exists, dir_fd=at)
                and not (
                    name.startswith("checkpoint")
                    and (
                        access(name + hf, exists, dir_fd=at)
                        or access(name + rng, exists, dir_fd=at)
                    )
                )
                and not (tag is not None and name.startswith("global_step"))
                and name[-5:] != ".ckpt"
            ):
                skipped.append(_new(Checkpoint, (cand.path, cand.step, unknown, False, no_mark)))
                continue
            judged = _judge(cand, tag, ds_step)
            if judged.complete:
                return Resolution(judged, tuple(skipped))
            skipped.append(judged)
    finally:
        os.close(at)
    return Resolution(None, tuple(skipped))


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
    """One checkpoint (a folder or a Lightning file), judged as the resolver would."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{str(path)!r} does not exist")
    if not (path.is_dir() or path.is_file()):
        raise CheckpointError(f"{str(path)!r} is neither a folder nor a file")
    tag = None
    with contextlib.suppress(OSError, UnicodeDecodeError):
        tag = (path.parent / DEEPSPEED_TAG).read_text().strip() or None
    cand = _Candidate(step_of(path.name), path.name, str(path), path.is_dir())
    return _judge(cand, tag, step_of(tag) if tag else None)


def list_all(folder: Path | str) -> list[Checkpoint]:
    """Every checkpoint candidate, newest first, each judged."""
    folder = Path(folder)
    scan = _scan(folder)
    ds_step = step_of(scan.tag) if scan.tag else None
    out = [_judge(c, scan.tag, ds_step) for c in _order(scan.candidates)]
    missing = _deepspeed_target_missing(folder, scan.tag, scan.candidates)
    return ([missing] if missing else []) + out


def ignored(folder: Path | str) -> list[Ignored]:
    """What in ``folder`` is not a checkpoint, and why."""
    return sorted(_scan(Path(folder)).ignored, key=lambda i: i.name)


def summarize(skipped: tuple[Checkpoint, ...], shown: int = 3) -> list[str]:
    """'passing over' lines for the first few; one summary line for the rest."""
    lines = [f"passing over {s.name}: {s.reason}" for s in skipped[:shown]]
    if len(skipped) > shown:
        lines.append(f"... and {len(skipped) - shown} more newer ones that are not complete")
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


def _fsync_path(path: Path, *, directory: bool = False) -> None:
    flags = os.O_RDONLY | (os.O_DIRECTORY if directory else 0)
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
            _fsync_path(full)
            manifest[rel] = full.stat().st_size
        _fsync_path(Path(root), directory=True)
    if not manifest:
        raise CheckpointError(
            f"the checkpoint of step {step} is empty: nothing was written to {str(incoming)!r}"
        )
    marker = incoming / MARKER
    stamp = time.time() if now is None else now
    text = json.dumps({"step": step, "committed_at": stamp, "files": manifest}, sort_keys=True)
    write_atomic(marker, text + "\n", mode=access.file_mode)
    set_mode(incoming, access.dir_mode)
    _fsync_path(incoming, directory=True)
    return _publish(incoming, folder, step, stamp)


def _publish(sealed: Path, folder: Path, step: int, stamp: float) -> Path:
    final = folder / step_dir_name(step)
    if final.exists():
        ok, _ = _check_marker(final) if (final / MARKER).exists() else (False, "")
        if ok:
            # Already committed (a periodic and a just-in-time save of one step):
            # keep the one that was there, set ours aside.
            aside = folder / f".duplicate-{final.name}-{int(stamp * 1000)}"
            sealed.rename(aside)
            return final
        final.rename(folder / f".partial-{final.name}-{int(stamp * 1000)}")
    sealed.rename(final)
    _fsync_path(folder, directory=True)
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
            ok, _ = _check_marker(path)
            step = int(m.group("step"))
            if ok and not (folder / step_dir_name(step)).exists():
                with contextlib.suppress(OSError):
                    published.append(str(_publish(path, folder, step, time.time())))
                    continue
        with contextlib.suppress(OSError):
            shutil.rmtree(path)
            removed.append(entry.name)
    return Cleaned(tuple(removed), tuple(published))
