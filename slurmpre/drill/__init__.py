"""The preemption drill: slurmpre's promise, kept on the local sandbox and shown side by
side with an uninterrupted run and the seeds' recipe: see docs/drill.md.
"""
