"""The wrapper's command line: ``slurmpre.job run [options] -- COMMAND``, read with the
one table of keys the batch script wrote it from (`slurmpre.login.render.launch_argv`),
each key into the part that reads it (`Key.part`). The defaults are the table's, for a
wrapper run by hand.
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
from typing import Any

from slurmpre import defaults, keys, signals
from slurmpre.errors import UsageError
from slurmpre.folder import access
from slurmpre.job.start import options
from slurmpre.job.start.limits import Limits
from slurmpre.job.start.options import WatchConfig
from slurmpre.placement.policy import Goals


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
    limits: Limits = Limits()  # noqa: RUF009 - frozen: one shared default is safe


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


def _deadline(text: str) -> str:
    """The spec's deadline, checked as at submit (the wrapper can be run by hand)."""
    from slurmpre.placement import deadline  # here: datetime only for a deadline

    try:
        deadline.parse(text, first_submit=0.0, key="--deadline")
    except UsageError as exc:
        raise UsageError(str(exc).replace("--deadline = ", "--deadline ")) from None
    return text


# What the wrapper makes of an option's text (`Key.convert`); an empty text is None.
_CONVERT: dict[str, Callable[[str], Any]] = {
    "pattern": keys.pattern,
    "signal": signals.notice_signal,
    "config_file": _config_file,
    "deadline": _deadline,
}


def _value(k: keys.Key, ns: argparse.Namespace) -> Any:
    """The option's value as the part that reads it takes it: in the key's range, converted."""
    value = getattr(ns, k.dest)
    flag = str(k.flag)
    if k.kind == "switch":  # --no-<key>: the key is on without it
        return not value
    if k.kind in ("seconds", "count") and value is not None:
        why = keys.in_range(k.name, value)
        if why is not None:
            raise UsageError(f"{flag} {why}, got {value:g}")
    if k.convert == "path":
        return Path(value)
    if k.convert == "access":
        return access.NAMES[value]
    if k.convert == "or_default":
        return value or k.default
    if k.convert:
        if not value:
            return None
        try:
            return _CONVERT[k.convert](value)
        except ValueError as exc:
            raise UsageError(f"{flag} {value!r} {exc}") from None
    return value


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
    parts: dict[str, dict[str, Any]] = {"": {}, "watch": {}, "goals": {}, "limits": {}}
    for k in keys.wrapper_options():
        parts[k.part][k.attr or k.name] = _value(k, ns)
    run = parts[""]
    if run["accelerate_config"] is not None and run["launcher"] != "accelerate":
        raise UsageError(f"--accelerate-config is for --launcher accelerate, not {run['launcher']}")
    return RunOptions(
        command=command,
        watch=WatchConfig(**parts["watch"], goals=Goals(**parts["goals"])),
        limits=Limits(**parts["limits"]),
        **run,
    )
