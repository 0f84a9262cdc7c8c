"""The job side's command-line parser, and what the watcher is configured with."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import NoReturn

from slurmpre import defaults
from slurmpre.errors import UsageError
from slurmpre.placement.policy import Goals


class Parser(argparse.ArgumentParser):
    """argparse for the job side's commands: a bad option is one UsageError, not exit 2
    with a usage screen from deep inside a job."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


@dataclass(frozen=True)
class Pace:
    """The watcher's own timings, no spec key's."""

    jitter: float = 0.2  # +- this fraction of the interval, so jobs do not poll in step
    commit_poll: float = 0.25  # after a notice, how often to look for its checkpoint
    max_backoff: float = 60.0  # longest wait between queries while a source does not answer
    exit_grace: float = 5.0  # after a commit, how long to wait for a script that does not listen


@dataclass(frozen=True)
class WatchConfig:
    """The watcher's settings: the spec's keys of the part "watch" (`slurmpre.keys`, each
    by its `attr` there) and its own timings (`Pace`); its defaults are the table's (a test holds
    them to it), for a watcher made by hand."""

    interval: float = defaults.POLL_INTERVAL  # seconds between Slurm queries
    window: float = defaults.PREEMPT_WINDOW  # drain -> removal, the provider's five minutes
    time_warning: float = defaults.WARN_BEFORE_END  # --signal warning -> time limit
    margin: float = defaults.SAFETY_MARGIN  # requeue anyway this long before the window closes
    in_place: bool = True  # lose a node other than the batch host: restart inside the allocation
    spare_overlap: bool = True  # with a spare, the next step starts beside this one (`overlap`)
    restart: str = defaults.RESTART  # else: "requeue", or "successor" (a new job takes over)
    min_nodes: int = 1  # ... when at least this many nodes remain (the spec's MIN)
    grow_to: int | None = None  # grow back onto idle preemptible nodes, up to this many
    grow_settle: float = defaults.GROW_SETTLE  # ... once they have stayed idle this long
    grow_min_gain: int = 1  # ... and at least this many of them
    spare_nodes: int = 0  # nodes held beyond the training ones (`spare_nodes`): a successor's too
    goals: Goals = Goals()  # noqa: RUF009 - frozen: one shared default is safe
    pace: Pace = Pace()
