"""Each layout's marks of completeness (one table, read by the fast path and the full
judge alike), and the full check of one folder or file of each layout."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from stat import S_ISLNK, S_ISREG

from slurmpre.folder.checkpoints.names import (
    ACCELERATE_RNG,
    CHECKPOINT_NAME,
    DCP_METADATA,
    DEEPSPEED_NAME,
    DEEPSPEED_TAG,
    HF_INCOMPLETE,
    HF_STATE,
    MEGATRON_NAME,
    NEMO_NAME,
    SLURMPRE_NAME,
    STEP_NAME,
    Format,
    step_of,
)
from slurmpre.folder.checkpoints.scan import Beside, _real_dir
from slurmpre.folder.checkpoints.trackers import check_megatron, check_nemo
from slurmpre.folder.layout import MARKER
from slurmpre.reading import (
    LARGE,
    MEDIUM,
    SMALL,
    open_regular,
    read_regular,
    read_text,
    real_inside,
)

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
    n = len(manifest)
    return True, f"committed by slurmpre ({n} {'file' if n == 1 else 'files'})"


def _relative(rel: object) -> bool:
    """A path that stays below the folder it is relative to, by its spelling."""
    if not isinstance(rel, str) or not rel or rel.startswith("/") or "\0" in rel:
        return False
    return ".." not in rel.split("/")


def _zip_complete(path: Path, root: str | None = None) -> tuple[bool, str]:
    """A Lightning/torch.save checkpoint: a zip archive that opens and holds a data.pkl.
    Only a regular file is opened (inside ``root``, a realpath, when given)."""
    import zipfile  # only for Lightning's files: kept off the wrapper's start-up

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


def _check_dir(path: str, name: str, group: int | None, beside: Beside) -> tuple[Format, bool, str]:
    """A folder's verdict by its layout (the grammar group its name matched)."""
    # `latest` looks for the same marks inline on its hot path, from the same table, and
    # sends here only the folders in which it found one.
    if group == MEGATRON_NAME:
        return (Format.MEGATRON, *check_megatron(path, name, beside))
    if group == NEMO_NAME:
        return (Format.NEMO, *check_nemo(path, name, beside))
    ds_tag, ds_tag_step = beside.tag, beside.tag_step
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
