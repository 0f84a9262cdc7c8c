"""The names of the training API, said once: `slurmpre` offers them (loading
`slurmpre.api` on first use), and `slurmpre.api` exports them."""

TRAINING_API = (
    "ElasticSampler",
    "batching",
    "checkpoint",
    "checkpoint_dir",
    "checkpoint_requested",
    "committed",
    "preemption_requested",
    "previous_world_size",
    "ranks",
    "restart_count",
    "resume_path",
    "resume_step",
    "world_size",
)
