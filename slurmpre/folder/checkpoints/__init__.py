"""Checkpoints on the shared folder: find the newest *complete* one, and commit new ones atomically.

The package, along its seams: `names` (the grammar), `layouts` (each layout's marks and
its check, in one table), `scan` (one read of the folder), `resolve`, `commit` and
`leftovers`. Callers import from here.

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
- Lightning ``.ckpt`` files (complete: a whole zip archive, as torch.save writes),
- Megatron-LM ``iter_NNNNNNN`` folders (complete: at or before the iteration in
  ``latest_checkpointed_iteration.txt``, which rank 0 writes after every rank saved),
- NeMo 2 ``...-step=N-consumed_samples=M[-last]`` folders (complete: no
  ``NAME-unfinished`` mark beside them),
- torchtitan's ``checkpoint/step-N`` folders (DCP, as above).
"""

from slurmpre.folder.checkpoints.commit import (
    commit,
    fresh_incoming,
    incoming_path,
    sync_path,
    writing,
)
from slurmpre.folder.checkpoints.leftovers import Cleaned, clean_leftovers
from slurmpre.folder.checkpoints.names import (
    MAX_STEP,
    STEP_DIGITS,
    Checkpoint,
    Format,
    check_step,
    step_of,
)
from slurmpre.folder.checkpoints.resolve import (
    SHOWN,
    Resolution,
    findable,
    ignored,
    judge,
    latest,
    list_all,
    summarize,
)
from slurmpre.folder.checkpoints.scan import Ignored
from slurmpre.folder.layout import LEFTOVER, MARKER, step_dir_name

__all__ = [
    "LEFTOVER",
    "MARKER",
    "MAX_STEP",
    "SHOWN",
    "STEP_DIGITS",
    "Checkpoint",
    "Cleaned",
    "Format",
    "Ignored",
    "Resolution",
    "check_step",
    "clean_leftovers",
    "commit",
    "findable",
    "fresh_incoming",
    "ignored",
    "incoming_path",
    "judge",
    "latest",
    "list_all",
    "step_dir_name",
    "step_of",
    "summarize",
    "sync_path",
    "writing",
]
