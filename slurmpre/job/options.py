"""The wrapper's options, in one table, and the checks its values share with the spec.

The table serves the wrapper's parser (`slurmpre.job.args`), the range checks
(`defaults.RANGES`, by spec key) and the spec, which refuses a wrapper flag as
its ``resume_arg``. The value checks here (`in_range`, `notice_signal`,
`pattern`) answer why a value is wrong, so that the spec can name its key and
the wrapper its flag with the same reason.
"""

from __future__ import annotations

import argparse
import math
import re
import signal
import warnings
from dataclasses import dataclass
from typing import NoReturn

from slurmpre import defaults
from slurmpre.errors import UsageError
from slurmpre.signals import RESERVED_SIGNALS, WARN_SIGNAL, signal_named


class Parser(argparse.ArgumentParser):
    """argparse for the job side's commands: a bad option is one UsageError, not exit 2
    with a usage screen from deep inside a job."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


@dataclass(frozen=True)
class Option:
    flag: str
    key: str  # the spec key it comes from (its range in defaults.RANGES, where it has one)
    kind: str  # "seconds", "count", "text", "switch" (a flag with no value) or "choice"
    default: object
    help: str


OPTIONS: tuple[Option, ...] = (
    Option("--launcher", "launcher", "choice", None,
           "torchrun: one torchrun per node, c10d rendezvous on node 0 (default); "
           "accelerate: one `accelerate launch` per node, the same rendezvous; "
           "plain: COMMAND once per node"),
    Option("--checkpoint-dir", "checkpoint_dir", "text", None,
           "the job's checkpoint folder (shared volume)"),
    Option("--nproc-per-node", "nproc_per_node", "count", None,
           "torchrun processes per node (default: the GPUs Slurm gave the node, else 1)"),
    Option("--resume-arg", "resume_arg", "text", None,
           "after a restart, append this flag and the checkpoint path to COMMAND"),
    Option("--accelerate-config", "accelerate_config", "text", None,
           "launcher accelerate: its config file (--config_file), on every attempt"),
    Option("--agree-timeout", "agree_timeout", "seconds", defaults.AGREE_TIMEOUT,
           "seconds the other nodes wait for node 0's checkpoint choice"),
    Option("--poll-interval", "poll_interval", "seconds", defaults.POLL_INTERVAL,
           "seconds between the watcher's Slurm queries"),
    Option("--window", "preempt_window", "seconds", defaults.PREEMPT_WINDOW,
           "seconds from drain to node removal on this provider"),
    Option("--time-warning", "warn_before_end", "seconds", defaults.WARN_BEFORE_END,
           "seconds before the time limit that sbatch's --signal warning comes"),
    Option("--safety-margin", "safety_margin", "seconds", defaults.SAFETY_MARGIN,
           "requeue anyway this long before the window closes"),
    Option("--drain-reason", "drain_reason", "text", None,
           "only drains whose reason matches this regular expression are notices"),
    Option("--notice-signal", "notice_signal", "text", None,
           "also send this signal (e.g. USR1) to the training processes on a notice"),
    Option("--no-watch", "watch", "switch", False,
           "no watcher: resume and rendezvous only"),
    Option("--min-nodes", "nodes", "count", 1,
           "fewest nodes the job trains on (the spec's MIN): an in-place restart "
           "needs at least this many left"),
    Option("--no-in-place", "in_place", "switch", False,
           "always requeue on a drain, never restart inside the allocation"),
    Option("--restart", "restart", "choice", None,
           "successor: submit the same script as a new job that takes over (default); "
           "requeue: scontrol requeue (Slurm's floor of cred_expire + 1 s)"),
    Option("--file-access", "file_access", "choice", None,
           "who may read what slurmpre creates: owner (default) or group"),
    Option("--max-restarts", "max_restarts", "count", defaults.MAX_RESTARTS,
           "give up (exit 1, no requeue) at a restart past this many, across the run's jobs"),
    Option("--max-stalled-restarts", "max_stalled_restarts", "count",
           defaults.MAX_STALLED_RESTARTS,
           "give up when this many attempts in a row committed no checkpoint (0: never)"),
)  # fmt: skip


@dataclass(frozen=True)
class WatchConfig:
    interval: float = defaults.POLL_INTERVAL  # seconds between Slurm queries
    jitter: float = 0.2  # +- this fraction of the interval, so jobs do not poll in step
    window: float = defaults.PREEMPT_WINDOW  # drain -> removal, the provider's five minutes
    time_warning: float = defaults.WARN_BEFORE_END  # --signal warning -> time limit
    margin: float = defaults.SAFETY_MARGIN  # requeue anyway this long before the window closes
    commit_poll: float = 0.25  # after a notice, how often to look for its checkpoint
    max_backoff: float = 60.0  # longest wait between queries while a source does not answer
    exit_grace: float = 5.0  # after a commit, how long to wait for a script that does not listen
    in_place: bool = True  # lose a node other than the batch host: restart inside the allocation
    restart: str = defaults.RESTART  # else: "requeue", or "successor" (a new job takes over)
    min_nodes: int = 1  # ... when at least this many nodes remain (the spec's MIN)


# Every word the wrapper takes as an option of its own.
FLAGS = frozenset(o.flag for o in OPTIONS) | {"--help", "-h"}


def in_range(key: str, value: float) -> str | None:
    """Why ``value`` is outside the key's range (`defaults.RANGES`); None when it is inside."""
    low, high = defaults.RANGES[key]
    if math.isfinite(value) and low <= value <= high:
        return None
    return f"must be from {low:g} to {high:g}"


def notice_signal(text: str) -> signal.Signals:
    """The signal named by ``text`` (``USR1``, ``SIGTERM``: a name, since numbers differ
    between architectures); ValueError saying why it cannot carry a notice."""
    sig = None if text.strip().isdigit() else signal_named(text)
    if sig is None:
        raise ValueError("is not a signal name such as USR1 or TERM")
    if sig in (signal.SIGKILL, signal.SIGSTOP):
        raise ValueError(
            "cannot be caught: the training could not checkpoint on it, only die or stop"
        )
    if sig in RESERVED_SIGNALS:
        raise ValueError(f"is reserved ({WARN_SIGNAL.name} carries Slurm's time-limit warning)")
    return sig


def pattern(text: str) -> re.Pattern[str]:
    """``text`` compiled as a regular expression; ValueError saying why it is not one."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # "possible nested set": still valid
            return re.compile(text)
    except re.error as exc:
        raise ValueError(f"is not a regular expression ({exc})") from None
