"""Callbacks for the frameworks that save by themselves: Hugging Face's Trainer, Lightning.

Each module imports its framework, so import the one you use:
``from slurmpre.integrations.hf import SlurmpreCallback``. Neither framework is a
dependency of slurmpre (extras ``slurmpre[hf]``, ``slurmpre[lightning]``).
"""

from __future__ import annotations

import slurmpre


def resume_from_checkpoint() -> str | None:
    """The checkpoint this attempt resumes from, as a framework's ``train``/``fit`` takes it
    (``resume_from_checkpoint=`` / ``ckpt_path=``); None for a fresh start."""
    path = slurmpre.resume_path()
    return None if path is None else str(path)
