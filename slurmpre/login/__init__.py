"""The login side: what runs on the login node, outside any job; it reads what the job
side writes and asks Slurm, and the job side never imports it (docs/architecture.md).
"""
