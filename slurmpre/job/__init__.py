"""The in-job runtime: one ``slurmpre.job run`` per node, under srun. It imports nothing
heavy nor of the login side (docs/architecture.md; tests/job/test_imports.py).
"""
