"""The login side: what runs on the login node, outside any job.

Generate (`spec`, `sbatch_options`, `render`, `submit`) and inspect (`jobs`,
`status`, `logs`, `cancel`, `capacity`, `plan`, `prune`). It reads what the job
side writes (the ledger, the checkpoint folder) and asks Slurm; the job side
never imports it. The click command line (`slurmpre.cli`) is a thin layer over it.
"""
