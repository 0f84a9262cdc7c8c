"""Callbacks for the frameworks that save by themselves: Hugging Face's Trainer, Lightning.

Each module imports its framework, so import the one you use:
``from slurmpre.integrations.hf import SlurmpreCallback``. Neither framework is a
dependency of slurmpre (extras ``slurmpre[hf]``, ``slurmpre[lightning]``).
"""
