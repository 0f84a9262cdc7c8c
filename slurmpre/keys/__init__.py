"""Every key of a job spec, in one table (`KEYS`), and what derives from it: docs/spec.md's
reference table (`markdown`) and the wrapper's options. See docs/architecture.md, "The
channels". Both sides import it: it imports nothing of either.
"""

from __future__ import annotations

import math
import re
import warnings

from slurmpre import defaults
from slurmpre.keys.code import CODE, CodeKeys
from slurmpre.keys.job import JOB, JobKeys
from slurmpre.keys.key import REQUIRED, Key, as_text, as_written
from slurmpre.keys.launch import LAUNCH, LaunchKeys
from slurmpre.keys.run import RUN, RunKeys
from slurmpre.keys.watch import WATCH, WatchKeys

__all__ = [
    "BY_NAME", "FLAGS", "KEYS", "RANGES", "REQUIRED", "WRAPPER_ONLY", "CodeKeys", "JobKeys",
    "Key", "LaunchKeys", "RunKeys", "WatchKeys", "as_text", "as_written",
]  # fmt: skip

# The one table, in the order docs/spec.md and `JobSpec` follow.
KEYS: tuple[Key, ...] = (*JOB, *LAUNCH, *WATCH, *RUN, *CODE)

BY_NAME = {k.name: k for k in KEYS}
# The wrapper's options that are not spec keys (a hand-run wrapper may set them).
WRAPPER_ONLY = (
    Key("agree_timeout", defaults.AGREE_TIMEOUT, "seconds", "", "",
        flag="--agree-timeout", kind="seconds", bounds=(1, 86_400),
        help="seconds the other nodes wait for node 0's checkpoint choice"),
)  # fmt: skip


def wrapper_options() -> tuple[Key, ...]:
    """Every option of the wrapper: the spec's keys it needs, then its own."""
    return tuple(k for k in KEYS if k.flag) + WRAPPER_ONLY


# Every word the wrapper takes as an option of its own (a resume_arg may not be one).
FLAGS = frozenset(str(k.flag) for k in wrapper_options()) | {"--help", "-h"}


# The range of every number a spec (and the wrapper's command line) accepts: finite, and
# inside what Slurm itself takes (--signal's time is at most 65535 s).
RANGES = {k.name: k.bounds for k in (*KEYS, *WRAPPER_ONLY) if k.bounds is not None}


def in_range(key: str, value: float) -> str | None:
    """Why ``value`` is outside the key's range (`RANGES`); None when it is inside."""
    low, high = RANGES[key]
    if math.isfinite(value) and low <= value <= high:
        return None
    return f"must be from {low:g} to {high:g}"


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
