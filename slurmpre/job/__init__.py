"""The in-job runtime: one ``slurmpre.job run`` per node, under srun.

It must start fast and never take the training down: it imports neither click
nor jinja2, and nothing here imports the login-node side (cli, render, status,
prune, plan).
"""
