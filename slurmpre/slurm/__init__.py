"""Talking to Slurm: one client Protocol, its backends, and pure parsers of Slurm's output.

Nothing here imports slurmpre beyond `errors` and the `cmd` seam.
"""
