"""A real Slurm cluster on this one machine (munge, slurmctld and one slurmd per node), for
the tests, the benchmarks and rehearsals: see docs/sandbox.md.
"""
