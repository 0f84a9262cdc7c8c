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
import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from slurmpre.errors import CheckpointError

MARKER = ".slurmpre-complete"
DCP_METADATA = ".metadata"
HF_STATE = "trainer_state.json"
DEEPSPEED_TAG = "latest"
_STEP = re.compile(r"step[=_-]?(\d+)", re.IGNORECASE)
_TRAILING = re.compile(r"(\d+)$")
_HF_WEIGHTS = re.compile(
    r"^(model|pytorch_model|adapter_model|tf_model|flax_model)[^/]*\.(safetensors|bin|pt|h5|msgpack)$"
    r"|^model\.safetensors\.index\.json$|^pytorch_model\.bin\.index\.json$"
)


class Format(str, Enum):
    SLURMPRE = "slurmpre"
    DCP = "torch-dcp"
    HF = "hf-trainer"
    DEEPSPEED = "deepspeed"
    LIGHTNING = "lightning"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    step: int | None
    format: Format
    complete: bool
    reason: str

    def as_dict(self) -> dict[str, object]:
        return {
            "path": str(self.path),
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
    stem = name[:-5] if name.endswith(".ckpt") else name
    m = _STEP.search(stem) or _TRAILING.search(stem)
    return int(m.group(1)) if m else None


@dataclass(frozen=True)
class _Candidate:
    path: str  # plain strings: 10,000 pathlib objects cost more than the scan itself
    name: str
    step: int | None
    is_dir: bool


def _scan(folder: Path) -> tuple[list[_Candidate], str | None]:
    """One directory read: candidates, and the DeepSpeed tag if there is one."""
    candidates: list[_Candidate] = []
    tag: str | None = None
    try:
        entries = os.scandir(folder)
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint folder {str(folder)!r} does not exist") from None
    except NotADirectoryError:
        raise CheckpointError(f"checkpoint folder {str(folder)!r} is not a folder") from None
    except PermissionError:
        raise CheckpointError(f"checkpoint folder {str(folder)!r} cannot be read") from None
    with entries:
        for entry in entries:
            name = entry.name
            if name.startswith("."):
                continue  # our own in-flight commits, and other hidden files
            if name == DEEPSPEED_TAG and entry.is_file():
                with contextlib.suppress(OSError, UnicodeDecodeError):
                    tag = Path(entry.path).read_text().strip() or None
                continue
            try:
                is_dir = entry.is_dir()
            except OSError:
                continue  # a symlink loop or an entry that cannot be read: not a checkpoint
            if is_dir:
                candidates.append(_Candidate(entry.path, name, step_of(name), True))
            elif name.endswith(".ckpt"):
                candidates.append(_Candidate(entry.path, name, step_of(name), False))
    return candidates, tag


def _order(candidates: list[_Candidate]) -> list[_Candidate]:
    """Newest first: by step; those without a step in their name after, newest mtime first."""
    stepped = sorted(
        (c for c in candidates if c.step is not None),
        key=lambda c: (c.step, c.name),
        reverse=True,
    )
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
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            head = fh.read(4)
            fh.seek(max(0, size - 65557))
            tail = fh.read()
    except OSError as exc:
        return False, f"unreadable: {exc.strerror}"
    if head != b"PK\x03\x04":
        return False, "not a torch zip archive (partial, or a format that cannot be verified)"
    if b"PK\x05\x06" not in tail:
        return False, "partial: the zip archive has no end record"
    return True, "a whole torch zip archive"


def _check_dir(path: Path, ds_tag_step: int | None, ds_tag: str | None) -> tuple[Format, bool, str]:
    if (path / MARKER).exists():
        ok, why = _check_marker(path)
        return Format.SLURMPRE, ok, why
    meta = path / DCP_METADATA
    if meta.exists():
        try:
            empty = meta.stat().st_size == 0
        except OSError:
            empty = True
        if empty:
            return Format.DCP, False, "corrupt: .metadata is empty"
        return Format.DCP, True, ".metadata written"
    state = path / HF_STATE
    if state.exists():
        try:
            json.loads(state.read_text())
        except (OSError, ValueError):
            return Format.HF, False, f"corrupt: {HF_STATE} does not parse"
        try:
            names = [p.name for p in path.iterdir()]
        except OSError:
            names = []
        if not any(_HF_WEIGHTS.match(n) for n in names):
            return Format.HF, False, "partial: no model weights next to trainer_state.json"
        return Format.HF, True, f"{HF_STATE} and weights written"
    if ds_tag is not None and path.name.startswith("global_step"):
        step = step_of(path.name)
        if path.name == ds_tag or (
            step is not None and ds_tag_step is not None and step < ds_tag_step
        ):
            try:
                has_files = any(True for _ in os.scandir(path))
            except OSError:
                has_files = False
            if has_files:
                return Format.DEEPSPEED, True, f"at or before the '{DEEPSPEED_TAG}' tag {ds_tag}"
            return Format.DEEPSPEED, False, "empty folder"
        return Format.DEEPSPEED, False, f"newer than the '{DEEPSPEED_TAG}' tag {ds_tag}: unfinished"
    return (
        Format.UNKNOWN,
        False,
        "partial: no completion mark (.slurmpre-complete, .metadata, trainer_state.json)",
    )


def _judge(c: _Candidate, ds_tag: str | None) -> Checkpoint:
    path = Path(c.path)
    if not c.is_dir:
        ok, why = _zip_complete(path)
        return Checkpoint(path, c.step, Format.LIGHTNING, ok, why)
    ds_step = step_of(ds_tag) if ds_tag else None
    fmt, ok, why = _check_dir(path, ds_step, ds_tag)
    return Checkpoint(path, c.step, fmt, ok, why)


def _deepspeed_target_missing(
    folder: Path, tag: str | None, candidates: list[_Candidate]
) -> Checkpoint | None:
    if tag is None or any(c.name == tag for c in candidates):
        return None
    return Checkpoint(
        folder / tag,
        step_of(tag),
        Format.DEEPSPEED,
        False,
        f"corrupt: '{DEEPSPEED_TAG}' names {tag}, which does not exist",
    )


def _not_a_checkpoint(judged: Checkpoint) -> bool:
    """A folder with no step in its name and no completion mark (``logs``) is not a checkpoint."""
    return judged.step is None and judged.format is Format.UNKNOWN


def latest(folder: Path | str) -> Resolution:
    """The newest complete checkpoint under ``folder`` (None if there is none)."""
    folder = Path(folder)
    candidates, tag = _scan(folder)
    skipped: list[Checkpoint] = []
    missing = _deepspeed_target_missing(folder, tag, candidates)
    if missing is not None:
        skipped.append(missing)
    for cand in _order(candidates):
        judged = _judge(cand, tag)
        if _not_a_checkpoint(judged):
            continue
        if judged.complete:
            return Resolution(judged, tuple(skipped))
        skipped.append(judged)
    return Resolution(None, tuple(skipped))


def list_all(folder: Path | str) -> list[Checkpoint]:
    """Every checkpoint candidate, newest first, each judged."""
    folder = Path(folder)
    candidates, tag = _scan(folder)
    out = [j for j in (_judge(c, tag) for c in _order(candidates)) if not _not_a_checkpoint(j)]
    missing = _deepspeed_target_missing(folder, tag, candidates)
    return ([missing] if missing else []) + out


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


def fresh_incoming(folder: Path, step: int, attempt_tag: str) -> Path:
    """An empty in-flight folder; leftovers of an earlier try are set aside, not reused."""
    incoming = incoming_path(folder, step, attempt_tag)
    if incoming.exists():
        incoming.rename(incoming.with_name(f"{incoming.name}.stale-{time.time_ns()}"))
    incoming.mkdir(parents=True)
    return incoming


def _fsync_path(path: Path, *, directory: bool = False) -> None:
    flags = os.O_RDONLY | (os.O_DIRECTORY if directory else 0)
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def commit(incoming: Path, folder: Path, step: int, *, now: float | None = None) -> Path:
    """Seal ``incoming`` as the complete checkpoint of ``step`` and move it into place.

    Files are fsynced, a marker with their sizes is written, then one rename
    publishes the folder: a kill at any instant leaves either the previous
    state or a complete new checkpoint. An existing *complete* checkpoint of the
    same step is never replaced (ours is dropped instead); a partial one left
    by a killed attempt is moved aside, not deleted. A checkpoint with no file
    in it is refused: it would become "latest" with nothing to resume from.
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
    marker.write_text(
        json.dumps({"step": step, "committed_at": stamp, "files": manifest}, sort_keys=True) + "\n"
    )
    _fsync_path(marker)
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
def writing(folder: Path, step: int, attempt_tag: str = "local") -> Iterator[Path]:
    """Single-process commit: yield a fresh folder to write into, commit it on success."""
    check_step(step)
    folder.mkdir(parents=True, exist_ok=True)
    incoming = fresh_incoming(folder, step, attempt_tag)
    yield incoming
    commit(incoming, folder, step)


# -- leftovers of dead attempts ------------------------------------------------------
_LEFTOVER = re.compile(
    r"^\.(?:sync)?\.?incoming-step-(?P<step>\d+)-(?P<tag>[A-Za-z0-9_.-]+?)(?:\.stale-\d+)?$"
    r"|^\.(?:partial|duplicate)-step-\d+-\d+$"
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
        m = _LEFTOVER.match(entry.name)
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
