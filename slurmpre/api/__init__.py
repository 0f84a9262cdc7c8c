"""What training scripts import: where to resume, restart facts, and an atomic checkpoint
(README.md shows them in a script). Light on purpose (no click, no jinja2, no torch at
import): every rank imports it.
"""

from slurmpre._api_names import TRAINING_API
from slurmpre.api.attempt import checkpoint_dir as checkpoint_dir
from slurmpre.api.attempt import previous_world_size as previous_world_size
from slurmpre.api.attempt import ranks as ranks
from slurmpre.api.attempt import restart_count as restart_count
from slurmpre.api.attempt import resume_path as resume_path
from slurmpre.api.attempt import resume_step as resume_step
from slurmpre.api.attempt import world_size as world_size
from slurmpre.api.batching import ElasticSampler as ElasticSampler
from slurmpre.api.batching import batching as batching
from slurmpre.api.notices import checkpoint_requested as checkpoint_requested
from slurmpre.api.notices import preemption_requested as preemption_requested
from slurmpre.api.notices import watch_notices as watch_notices
from slurmpre.api.saving import checkpoint as checkpoint
from slurmpre.api.saving import committed as committed

# The API, as the package names it (`slurmpre.TRAINING_API`), and a test hook.
__all__ = [*TRAINING_API, "watch_notices"]
