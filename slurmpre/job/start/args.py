"""The wrapper's command line: ``slurmpre.job run [options] -- COMMAND``.

The template writes every option from the spec; the defaults here are the
same `slurmpre.defaults`, for a wrapper run by hand.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from slurmpre import defaults, keys, signals
from slurmpre.errors import UsageError
from slurmpre.folder import access
from slurmpre.job.start import options
from slurmpre.job.start.options import WatchConfig
from slurmpre.placement.policy import Goals

_T = TypeVar("_T")


@dataclass(frozen=True)
class RunOptions:
    launcher: str
    checkpoint_dir: Path
    command: tuple[str, ...]
    nproc_per_node: int | None = None
    resume_arg: str | None = None
    accelerate_config: str | None = None  # launcher accelerate: its --config_file
    local_dir: str = "off"  # where checkpoint() writes first on the node (`slurmpre.tier`)
    agree_timeout: float = defaults.AGREE_TIMEOUT
    watch: WatchConfig = field(default_factory=WatchConfig)
    watching: bool = True
    drain_reason: re.Pattern[str] | None = None
    notice_signal: signal.Signals | None = None
    file_access: access.Access = access.OWNER
    max_restarts: int = defaults.MAX_RESTARTS
    max_stalled_restarts: int = defaults.MAX_STALLED_RESTARTS


def _in_range(flag: str, key: str, value: float) -> float:
    """The spec's range for the key: the wrapper can be run by hand."""
    why = defaults.in_range(key, value)
    if why is not None:
        raise UsageError(f"{flag} {why}, got {value:g}")
    return value


def _checked(flag: str, text: str | None, check: Callable[[str], _T]) -> _T | None:
    """``check(text)``, or None without a value; a UsageError naming the flag and its value."""
    if not text:
        return None
    try:
        return check(text)
    except ValueError as exc:
        raise UsageError(f"{flag} {text!r} {exc}") from None


def _config_file(text: str) -> str:
    """A file this node can read (checked at submit; here again, on every node and attempt:
    a node that does not see the shared volume fails before it launches)."""
    if not Path(text).is_absolute():
        raise ValueError("is not an absolute path")
    try:
        with open(text, "rb") as fh:  # noqa: PTH123 - a str path
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise ValueError("is not a regular file")
    except OSError as exc:
        raise ValueError(f"cannot be read on this node ({exc.strerror or exc})") from None
    return text


def _goals(ns: argparse.Namespace) -> Goals:
    """The spec's deadline and budgets (checked as at submit: the wrapper can be run by hand)."""
    if ns.deadline:
        from slurmpre.placement import deadline  # here: datetime only for a deadline

        try:
            deadline.parse(ns.deadline, first_submit=0.0, key="--deadline")
        except UsageError as exc:
            raise UsageError(str(exc).replace("--deadline = ", "--deadline ")) from None
    return Goals(
        deadline=ns.deadline or None,
        total_steps=ns.total_steps,
        fallback_after=ns.fallback_after,
        max_wait_s=ns.max_wait,
        max_preemptions=ns.max_preemptions,
        max_cost=ns.max_cost,
    )


def _parser() -> options.Parser:
    parser = options.Parser(
        prog="slurmpre run",
        add_help=True,
        usage="slurmpre run [options] -- COMMAND [ARGS...]",
        description="Inside a Slurm job, on every node (srun --ntasks-per-node=1): resume from "
        "the newest complete checkpoint (node 0 chooses, the others follow), launch COMMAND "
        "(under torchrun, or as is), and on node 0 watch for a drain or the time-limit "
        "warning: tell the training, wait for its checkpoint, requeue the job. The sbatch "
        "script slurmpre renders writes every option from the spec.",
    )
    for k in keys.wrapper_options():
        flag = str(k.flag)
        if k.kind == "switch":
            parser.add_argument(flag, action="store_true", help=k.help)
        elif k.kind == "choice":
            parser.add_argument(flag, choices=k.choices, default=k.wrapper_default, help=k.help)
        else:
            parser.add_argument(
                flag,
                type={"seconds": float, "count": int, "text": str}[k.kind],
                default=k.wrapper_default,
                required=k.flag == "--checkpoint-dir",
                help=k.help,
            )
    return parser


def parse_args(argv: Sequence[str]) -> RunOptions:
    parser = _parser()
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
    numbers = {}
    for k in keys.wrapper_options():
        value = getattr(ns, str(k.flag)[2:].replace("-", "_"))
        if k.kind in ("seconds", "count") and value is not None:
            numbers[k.name] = _in_range(str(k.flag), k.name, value)
    watch = WatchConfig(
        interval=numbers["poll_interval"],
        window=numbers["preempt_window"],
        time_warning=numbers["warn_before_end"],
        margin=numbers["safety_margin"],
        in_place=not ns.no_in_place,
        spare_overlap=not ns.no_spare_overlap,
        restart=ns.restart,
        min_nodes=ns.min_nodes,
        grow_to=ns.grow_to,
        grow_settle=ns.grow_settle,
        grow_min_gain=ns.grow_min_gain,
        spare_nodes=ns.spare_nodes,
        goals=_goals(ns),
    )
    reason = _checked("--drain-reason", ns.drain_reason, keys.pattern)
    notice_signal = _checked("--notice-signal", ns.notice_signal, signals.notice_signal)
    config = _checked("--accelerate-config", ns.accelerate_config, _config_file)
    if config is not None and ns.launcher != "accelerate":
        raise UsageError(f"--accelerate-config is for --launcher accelerate, not {ns.launcher}")
    return RunOptions(
        launcher=ns.launcher,
        checkpoint_dir=Path(ns.checkpoint_dir),
        command=command,
        nproc_per_node=ns.nproc_per_node,
        resume_arg=ns.resume_arg,
        accelerate_config=config,
        local_dir=ns.local_dir or "off",
        agree_timeout=ns.agree_timeout,
        watch=watch,
        watching=not ns.no_watch,
        drain_reason=reason,
        notice_signal=notice_signal,
        file_access=access.NAMES[ns.file_access],
        max_restarts=ns.max_restarts,
        max_stalled_restarts=ns.max_stalled_restarts,
    )
