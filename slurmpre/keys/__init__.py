"""Every key of a job spec, in one table: its default, the parser that checks it
(`slurmpre.login.parsers`), the wrapper's option it becomes when the job side needs it
(`slurmpre.job.start.args`, and `slurmpre.login.render.launch_argv` writes it), and its
documentation (docs/spec.md's reference table is `markdown()`). `JobSpec` holds to it (a
test fails when they differ). Both sides import it: it imports nothing of either.
"""

from __future__ import annotations

import re
import warnings

from slurmpre import defaults
from slurmpre.keys.code import CODE
from slurmpre.keys.job import JOB
from slurmpre.keys.key import REQUIRED, Key, as_text, as_written
from slurmpre.keys.run import RUN

__all__ = [
    "BY_NAME", "FLAGS", "KEYS", "REQUIRED", "WRAPPER_ONLY", "WRITTEN", "Key", "as_text",
    "as_written",
]  # fmt: skip

# The one table, in the order docs/spec.md and `JobSpec` follow.
KEYS: tuple[Key, ...] = (*JOB, *RUN, *CODE)

BY_NAME = {k.name: k for k in KEYS}
# The wrapper's options that are not spec keys (a hand-run wrapper may set them).
WRAPPER_ONLY = (
    Key("agree_timeout", defaults.AGREE_TIMEOUT, "seconds", "", "",
        flag="--agree-timeout", kind="seconds",
        help="seconds the other nodes wait for node 0's checkpoint choice"),
)  # fmt: skip
# The order in which the batch script writes the wrapper's options (the golden files').
WRITTEN = (
    "launcher", "checkpoint_dir", "nproc_per_node", "resume_arg", "accelerate_config",
    "poll_interval", "preempt_window", "safety_margin", "warn_before_end", "drain_reason",
    "notice_signal", "watch", "nodes", "restart", "grow", "grow_settle", "grow_min_gain",
    "in_place", "spare_nodes", "spare_overlap", "file_access", "local_dir", "max_restarts",
    "max_stalled_restarts", "max_preemptions", "deadline", "total_steps", "fallback_after",
    "max_wait", "max_cost",
)  # fmt: skip


def wrapper_options() -> tuple[Key, ...]:
    """Every option of the wrapper: the spec's keys it needs, then its own."""
    return tuple(k for k in KEYS if k.flag) + WRAPPER_ONLY


# Every word the wrapper takes as an option of its own (a resume_arg may not be one).
FLAGS = frozenset(str(k.flag) for k in wrapper_options()) | {"--help", "-h"}


def pattern(text: str) -> re.Pattern[str]:
    """``text`` compiled as a regular expression; ValueError saying why it is not one."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # "possible nested set": still valid
            return re.compile(text)
    except re.error as exc:
        raise ValueError(f"is not a regular expression ({exc})") from None


def markdown() -> str:
    """docs/spec.md's reference table."""
    rows = ["| key | default | meaning |", "|---|---|---|"]
    for k in KEYS:
        rows.append(f"| `{k.name}` | {k.shown} | {k.doc} |")
    return "\n".join(rows) + "\n"
