"""The names a checkpoint can have (one grammar per layout), its step, and what a judged
candidate is. Nothing here touches the disk."""

from __future__ import annotations

import os
import re
from enum import Enum
from pathlib import Path
from typing import NamedTuple

from slurmpre.errors import CheckpointError

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
    rf"|(?:.*?[-_. ])??step[-_=]?({_D})"  # 4: other step names: DCP's step_N, run-step-N
    rf"|iter_(\d{{7,{STEP_DIGITS}}})"  # 5: Megatron-LM's iter_0001000 ('iter_{{:07d}}')
    # 6: NeMo 2's ModelCheckpoint, '{{model_name}}--{{val_loss:.2f}}-{{step}}-{{consumed_samples}}'
    # as Lightning formats it (nemo.collections.llm.recipes.log.default), and the '-last'
    # copy (or link) of that or of any '...-{{step}}' name
    rf"|(?:.*?[-_. ])??step=({_D})(?:-consumed_samples=\d+(?:\.\d+)?(?:-last)?|-last)",
    re.ASCII,
)
SLURMPRE_NAME, DEEPSPEED_NAME, CHECKPOINT_NAME, STEP_NAME, MEGATRON_NAME, NEMO_NAME = range(1, 7)
# Megatron-LM's tracker beside its iter_N folders: rank 0 writes the iteration into it
# once every rank has saved (megatron/training/checkpointing.py, save_checkpoint).
MEGATRON_TRACKER = "latest_checkpointed_iteration.txt"
# NeMo 2 touches NAME-unfinished beside a checkpoint before its save (or removal) and
# removes it once every rank is done (ModelCheckpoint.set_checkpoint_unfinished_marker).
NEMO_UNFINISHED = "-unfinished"
# torchtitan saves into <dump_folder>/<checkpoint.folder>/step-N, "checkpoint" by default.
TORCHTITAN_FOLDER = "checkpoint"
# Lightning: epoch=1-step=200.ckpt; and without a step, last.ckpt, epoch=3.ckpt, and
# hpc_ckpt_N.ckpt, the save of SLURMEnvironment's requeue signal (N counts saves).
_CKPT_STEPPED = re.compile(rf"(?:.*[-_])?step=({_D})(?:-v\d+)?\.ckpt", re.ASCII)
_CKPT_UNSTEPPED = re.compile(rf"(?:last|epoch={_D}|hpc_ckpt_\d+)(?:-v\d+)?\.ckpt", re.ASCII)
# Any name of any layout, in one call; never a hidden one (in-flight commits and the like).
_ANY_NAME = re.compile(
    "(?!\\.)(?:"
    + "|".join(f"(?:{p.pattern})" for p in (_DIR_NAME, _CKPT_STEPPED, _CKPT_UNSTEPPED))
    + ")",
    re.ASCII,
)
# Every grammar holds one of these: a name without costs one C-level search and no more.
_MAYBE = re.compile(r"step|checkpoint|iter_|\.ckpt$").search  # hpc_ckpt_N.ckpt ends so
# In a match of _ANY_NAME, groups 1.._DIR_GROUPS are a folder's step, the next a file's.
_DIR_GROUPS = _DIR_NAME.groups
if (
    _ANY_NAME.groups != _DIR_GROUPS + _CKPT_STEPPED.groups + _CKPT_UNSTEPPED.groups
):  # pragma: no cover
    raise ImportError("checkpoint name grammar: a pattern gained a capturing group")


class Format(str, Enum):
    SLURMPRE = "slurmpre"
    DCP = "torch-dcp"
    HF = "hf-trainer"
    DEEPSPEED = "deepspeed"
    LIGHTNING = "lightning"
    ACCELERATE = "accelerate"
    MEGATRON = "megatron"
    NEMO = "nemo"
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


# Names without a step that still count: Lightning's hpc_ckpt_N (its Nth requeue save),
# epoch=N, and the -vN a name gets when it is taken. Their numbers order them, never their
# files' times (a copy or a touch changes those).
_NUMBERED = re.compile(r"(last|epoch=|hpc_ckpt_)(\d*)(?:-v(\d+))?\.ckpt", re.ASCII)


def number_of(name: str) -> tuple[str, int, int] | None:
    """An unstepped name's family and its numbers (``hpc_ckpt_12.ckpt`` -> ("hpc_ckpt_",
    12, 0)), by which two of one family are ordered: the higher is newer. None: no such."""
    m = _NUMBERED.fullmatch(name)
    if m is None:
        return None
    return m[1], int(m[2] or 0), int(m[3] or 0)


def step_of(name: str) -> int | None:
    """The step a checkpoint's name gives, by the grammar of its layout (None: no step)."""
    m = _DIR_NAME.fullmatch(name) or _CKPT_STEPPED.fullmatch(name)
    return None if m is None or m.lastindex is None else int(m[m.lastindex])


# -- committing ------------------------------------------------------------------
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


# slurmpre's own names below step 10^8: eight digits, so their string order is their steps'.
_OWN = re.compile(r"step-\d{8}", re.ASCII).fullmatch
_OWN_LIMIT = 10**8
