"""A real Slurm cluster on this one machine: munge, slurmctld and one slurmd per node.

For the tests, the benchmarks, and users who want to rehearse a job before
paying for GPUs. Debian's packages, Slurm 22.05 (Debian 12) and 24.11 (Debian 13).
"""
