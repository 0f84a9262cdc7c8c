"""The wrapper's command line: ``slurmpre.job run [options] -- COMMAND``.

The template writes every option from the spec; the defaults here are the
same `slurmpre.defaults`, for a wrapper run by hand.
"""

from __future__ import annotations

import argparse
import math
import re
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from slurmpre import access, defaults, launchers
from slurmpre.errors import UsageError
from slurmpre.job.watch import WatchConfig
from slurmpre.signals import RESERVED_SIGNALS, signal_named


@dataclass(frozen=True)
class RunOptions:
    launcher: str
    checkpoint_dir: Path
    command: tuple[str, ...]
    nproc_per_node: int | None = None
    resume_arg: str | None = None
    agree_timeout: float = defaults.AGREE_TIMEOUT
    watch: WatchConfig = field(default_factory=WatchConfig)
    watching: bool = True
    drain_reason: re.Pattern[str] | None = None
    notice_signal: signal.Signals | None = None
    file_access: access.Access = access.OWNER


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _in_range(flag: str, key: str, value: float) -> float:
    """The same finite ranges as the spec's (`defaults.RANGES`): the wrapper can be run by hand."""
    low, high = defaults.RANGES[key]
    if not math.isfinite(value) or not low <= value <= high:
        raise UsageError(f"{flag} must be from {low:g} to {high:g}, got {value:g}")
    return value


# The options that are seconds: flag, the spec key whose range applies, default, help.
_SECONDS = (
    ("--agree-timeout", "agree_timeout", defaults.AGREE_TIMEOUT,
     "seconds the other nodes wait for node 0's checkpoint choice"),
    ("--poll-interval", "poll_interval", defaults.POLL_INTERVAL,
     "seconds between the watcher's Slurm queries"),
    ("--window", "preempt_window", defaults.PREEMPT_WINDOW,
     "seconds from drain to node removal on this provider"),
    ("--time-warning", "warn_before_end", defaults.WARN_BEFORE_END,
     "seconds before the time limit that sbatch's --signal warning comes"),
    ("--safety-margin", "safety_margin", defaults.SAFETY_MARGIN,
     "requeue anyway this long before the window closes"),
)  # fmt: skip


def parse_args(argv: Sequence[str]) -> RunOptions:
    parser = _Parser(
        prog="slurmpre run",
        add_help=True,
        usage="slurmpre run [options] -- COMMAND [ARGS...]",
        description="Inside a Slurm job, on every node (srun --ntasks-per-node=1): resume from "
        "the newest complete checkpoint (node 0 chooses, the others follow), launch COMMAND "
        "(under torchrun, or as is), and on node 0 watch for a drain or the time-limit "
        "warning: tell the training, wait for its checkpoint, requeue the job. The sbatch "
        "script slurmpre renders writes every option from the spec.",
    )
    parser.add_argument(
        "--launcher",
        choices=launchers.NAMES,
        default=launchers.DEFAULT.value,
        help="torchrun: one torchrun per node, c10d rendezvous on node 0 (default); "
        "accelerate: one `accelerate launch` per node, the same rendezvous; "
        "plain: COMMAND once per node",
    )
    parser.add_argument(
        "--checkpoint-dir", required=True, help="the job's checkpoint folder (shared volume)"
    )
    parser.add_argument(
        "--nproc-per-node",
        type=int,
        default=None,
        help="torchrun processes per node (default: the GPUs Slurm gave the node, else 1)",
    )
    parser.add_argument(
        "--resume-arg",
        default=None,
        help="after a restart, append this flag and the checkpoint path to COMMAND",
    )
    for flag, _key, default, text in _SECONDS:
        parser.add_argument(flag, type=float, default=default, help=text)
    parser.add_argument(
        "--drain-reason",
        default=None,
        help="only drains whose reason matches this regular expression are notices",
    )
    parser.add_argument(
        "--notice-signal",
        default=None,
        help="also send this signal (e.g. USR1) to the training processes on a notice",
    )
    parser.add_argument(
        "--no-watch", action="store_true", help="no watcher: resume and rendezvous only"
    )
    parser.add_argument(
        "--min-nodes",
        type=int,
        default=1,
        help="fewest nodes the job trains on (the spec's MIN): an in-place restart "
        "needs at least this many left",
    )
    parser.add_argument(
        "--no-in-place",
        action="store_true",
        help="always requeue on a drain, never restart inside the allocation",
    )
    parser.add_argument(
        "--file-access",
        choices=tuple(access.NAMES),
        default=access.OWNER.name,
        help="who may read what slurmpre creates: owner (default) or group",
    )
    args_list = list(argv)
    if args_list and args_list[0] == "run":
        args_list = args_list[1:]
    cut = args_list.index("--") if "--" in args_list else len(args_list)
    ns = parser.parse_args(args_list[:cut])
    if cut == len(args_list):
        raise UsageError("give the command to run after --, e.g. slurmpre run -- python train.py")
    command = tuple(args_list[cut + 1 :])
    if not command:
        raise UsageError("no command after --")
    if not 1 <= ns.min_nodes <= defaults.RANGES["nodes"][1]:
        raise UsageError(
            f"--min-nodes must be from 1 to {defaults.RANGES['nodes'][1]:g}, got {ns.min_nodes}"
        )
    if ns.nproc_per_node is not None:
        _in_range("--nproc-per-node", "nproc_per_node", ns.nproc_per_node)
    seconds = {
        key: _in_range(flag, key, getattr(ns, flag[2:].replace("-", "_")))
        for flag, key, _default, _text in _SECONDS
    }
    watch = WatchConfig(
        interval=seconds["poll_interval"],
        window=seconds["preempt_window"],
        time_warning=seconds["warn_before_end"],
        margin=seconds["safety_margin"],
        in_place=not ns.no_in_place,
        min_nodes=ns.min_nodes,
    )
    reason = None
    if ns.drain_reason:
        try:
            reason = re.compile(ns.drain_reason)
        except re.error as exc:
            raise UsageError(
                f"--drain-reason {ns.drain_reason!r} is not a pattern: {exc}"
            ) from None
    notice_signal = parse_signal(ns.notice_signal) if ns.notice_signal else None
    return RunOptions(
        launcher=ns.launcher,
        checkpoint_dir=Path(ns.checkpoint_dir),
        command=command,
        nproc_per_node=ns.nproc_per_node,
        resume_arg=ns.resume_arg,
        agree_timeout=ns.agree_timeout,
        watch=watch,
        watching=not ns.no_watch,
        drain_reason=reason,
        notice_signal=notice_signal,
        file_access=access.NAMES[ns.file_access],
    )


def parse_signal(name: str) -> signal.Signals:
    """``TERM``, ``SIGUSR2`` or ``12`` -> the signal; refuses the ones slurmpre needs for itself."""
    sig = signal_named(name)
    if sig is None:
        raise UsageError(f"--notice-signal {name!r} is not a signal name")
    if sig in RESERVED_SIGNALS:
        raise UsageError(f"--notice-signal {name!r} cannot be used: choose e.g. SIGUSR1 or SIGTERM")
    return sig
