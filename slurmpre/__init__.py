"""slurmpre: run ML jobs on preemptible Slurm nodes and lose no work when a node is taken back.

This module stays light: training scripts import it inside every rank, so it
imports neither click nor jinja2.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
