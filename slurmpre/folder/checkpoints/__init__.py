"""Checkpoints on the shared folder: find the newest *complete* one, and commit new ones atomically.

The package, along its seams: `names` (the grammar), `layouts` (each layout's marks and
its check, in one table), `scan` (one read of the folder), `resolve`, `commit` and
`leftovers`. Callers import from here.

The resolver reads the folder once (names only) and checks completeness from the newest
down until one passes (`resolve._Resolve`). The name says the layout, and the layout
which mark proves a save complete: docs/login.md has the table.
"""

from slurmpre.folder.checkpoints.commit import (
    commit,
    fresh_incoming,
    incoming_path,
    sync_path,
    writing,
)
from slurmpre.folder.checkpoints.leftovers import clean_leftovers
from slurmpre.folder.checkpoints.names import (
    MAX_STEP,
    Checkpoint,
    Format,
    check_step,
    step_of,
)
from slurmpre.folder.checkpoints.resolve import (
    Resolution,
    findable,
    ignored,
    judge,
    latest,
    list_all,
    summarize,
)
from slurmpre.folder.layout import MARKER, step_dir_name

__all__ = [
    "MARKER",
    "MAX_STEP",
    "Checkpoint",
    "Format",
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
