"""slurmpre: run ML jobs on preemptible Slurm nodes and lose no work when a node is taken back.

This module stays light: training scripts import it inside every rank, and the
in-job wrapper (``python -m slurmpre.job``) must handle Slurm's time-limit
warning from its first instant, so the training API is imported on first use
only. Nothing here imports click, jinja2 or torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from slurmpre._api_names import TRAINING_API
from slurmpre._version import __version__

# The login side's Python API (slurmpre.login.launch, .handle): imported on first use too.
_LOGIN = ("submit", "sweep", "Job", "JobFailed")


__all__ = ["Job", "JobFailed", "__version__", "submit", "sweep", *TRAINING_API]

if TYPE_CHECKING:
    from slurmpre.api import *  # noqa: F403 - the training API, as slurmpre.api names it
    from slurmpre.errors import JobFailed
    from slurmpre.login.handle import Job
    from slurmpre.login.launch import submit, sweep


def __getattr__(name: str) -> Any:
    if name == "JobFailed":
        return importlib.import_module("slurmpre.errors").JobFailed
    if name == "Job":
        return importlib.import_module("slurmpre.login.handle").Job
    if name in _LOGIN:
        return getattr(importlib.import_module("slurmpre.login.launch"), name)
    if name in TRAINING_API:
        return getattr(importlib.import_module("slurmpre.api"), name)
    raise AttributeError(f"module 'slurmpre' has no attribute {name!r}")
