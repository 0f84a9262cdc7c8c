"""The preemption drill: slurmpre's promise, kept on the local sandbox and shown side by side.

`slurmpre drill` submits a small real training job (examples/drill.toml)
through the spec, template, wrapper and watcher a real cluster uses, preempts
its nodes the provider's way on a seeded schedule, and compares the result with
an uninterrupted run and, with ``--baseline``, with the seeds' recipe.
"""
