"""The in-job runtime: one ``slurmpre.job run`` per node, under srun.

It must start fast and never take the training down: it imports neither click
nor jinja2, nor anything of the login side (`slurmpre.login`, `slurmpre.cli`);
tests/job/test_imports.py holds it to that.
"""
