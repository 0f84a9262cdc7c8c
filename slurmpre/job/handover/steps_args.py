"""The command line of the batch script's supervisor of steps (`slurmpre.job.handover.steps`):
``python -m slurmpre.job steps [options] -- srun [SRUN OPTIONS] WRAPPER...``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from slurmpre import keys
from slurmpre.errors import UsageError
from slurmpre.folder import access
from slurmpre.job.start import options

GRACE = 0.0  # after the request, seconds the training gets to exit by itself


@dataclass(frozen=True)
class StepsOptions:
    checkpoint_dir: Path
    srun: tuple[str, ...]
    grace: float = GRACE
    file_access: access.Access = access.OWNER
    spares: int = 0  # nodes of the job that do not train (`spare_nodes`)


def parse_args(argv: Sequence[str]) -> StepsOptions:
    parser = options.Parser(
        prog="slurmpre.job steps",
        usage="python -m slurmpre.job steps [options] -- srun [SRUN OPTIONS] WRAPPER...",
        description="In the batch script: run the job's step, and when its watcher asks, "
        "release drained nodes and run the next step on the nodes that remain.",
    )
    parser.add_argument("--checkpoint-dir", required=True, help="the job's checkpoint folder")
    parser.add_argument(
        "--grace",
        type=float,
        default=GRACE,
        help="seconds the training gets to exit after an in-place restart is asked",
    )
    parser.add_argument(
        "--spares", type=int, default=0, help="nodes of the job held as spares, not training"
    )
    parser.add_argument("--file-access", choices=tuple(access.NAMES), default=access.OWNER.name)
    args = list(argv)
    if args and args[0] == "steps":
        args = args[1:]
    if "--" not in args:
        raise UsageError("give the srun command after --")
    cut = args.index("--")
    ns = parser.parse_args(args[:cut])
    srun = tuple(args[cut + 1 :])
    if not srun:
        raise UsageError("no srun command after --")
    if not 0 <= ns.grace <= 3_600:
        raise UsageError(f"--grace must be from 0 to 3600 seconds, got {ns.grace:g}")
    why = keys.in_range("spare_nodes", ns.spares)  # the spec's key it is written from
    if why is not None:
        raise UsageError(f"--spares {why}, got {ns.spares}")
    return StepsOptions(
        Path(ns.checkpoint_dir),
        srun,
        ns.grace,
        file_access=access.NAMES[ns.file_access],
        spares=ns.spares,
    )
