"""The jobs the drill submits: slurmpre's example spec with the drill's steps and folder,
and the seeds' recipe as a plain sbatch script (the provider's way, for comparison)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

from slurmpre import environment
from slurmpre.defaults import SAFETY_MARGIN
from slurmpre.drill.options import DrillOptions
from slurmpre.errors import UsageError
from slurmpre.login.spec import JobSpec, read, validate

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "drill.toml"

SEEDS_SCRIPT = """#!/bin/bash
#SBATCH --job-name=drill-seeds
#SBATCH --nodes={nodes}
#SBATCH --constraint=preemptible
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output={log}
# The provider's recipe (the seeds' docs): --requeue, periodic checkpoints, and
# after a restart the latest one. The sandbox's nodes all answer on 127.0.0.1 (sandboxes
# side by side set their ports apart: environment.PORT_OFFSET).
export GLOO_SOCKET_IFNAME=lo
export {checkpoint_dir}={ckpt}
srun --ntasks-per-node=1 {python} {launch}-m slurmpre.drill.train {args} --mode seeds
"""
TORCHRUN = (
    "-m torch.distributed.run \\\n"
    "  --nnodes=$SLURM_JOB_NUM_NODES --nproc_per_node=1 --rdzv_id=$SLURM_JOB_ID \\\n"
    "  --rdzv_backend=c10d "
    f"--rdzv_endpoint=127.0.0.1:$((29500 + ${{{environment.PORT_OFFSET}:-0}})) \\\n  "
)


def seeds_script(
    folder: Path,
    opts: DrillOptions,
    nodes: str,
    log: str,
    *,
    python: str = sys.executable,
    plain: bool = False,
) -> str:
    """The seeds' recipe as a batch script checkpointing into ``folder``, its log
    ``folder/logs/<log>`` (the folder is made here); under torchrun, or with ``plain``
    the pure-Python trainer in one process on one node."""
    (folder / "logs").mkdir(parents=True)
    return SEEDS_SCRIPT.format(
        log=shlex.quote(str(folder / "logs" / log)),
        checkpoint_dir=environment.CHECKPOINT_DIR,
        ckpt=shlex.quote(str(folder)),
        python=shlex.quote(python),
        launch="" if plain else TORCHRUN,
        args=" ".join([*train_args(opts), *(["--plain"] if plain else [])]),
        nodes=nodes,
    )


def load_example(path: Path = EXAMPLE) -> dict[str, Any]:
    if not path.is_file():
        raise UsageError(
            f"{path} is missing: run the drill from a slurmpre checkout (it submits that spec)"
        )
    return read(path)


def drill_spec(
    raw: dict[str, Any],
    opts: DrillOptions,
    folder: Path,
    *,
    args: tuple[str, ...] = (),
    **overrides: Any,
) -> JobSpec:
    """The example spec as the drill submits it: this interpreter, these steps, this folder
    (and ``args`` for the training script, after the drill's own)."""
    command = list(raw["command"])
    if command[:1] == ["python"]:
        command[0] = sys.executable
    command += [*train_args(opts), *args]
    return validate(
        {
            **raw,
            "command": command,
            "checkpoint_dir": str(folder),
            "preempt_window": int(opts.window),
            "safety_margin": min(
                int(raw.get("safety_margin", SAFETY_MARGIN)), int(opts.window) // 3
            ),
            "poll_interval": min(float(raw.get("poll_interval", 1)), opts.window / 6),
            # The drill measures the requeue path, against the seeds' recipe, one restart
            # per preemption; in-place restarts have their own benchmark (bench/inplace.py).
            "in_place": False,
            **overrides,
        }
    )


def train_args(opts: DrillOptions) -> list[str]:
    return [
        "--steps",
        str(opts.training_steps()),
        "--every",
        str(opts.every),
        "--step-seconds",
        f"{opts.step_seconds:g}",
        "--save-seconds",
        f"{opts.save_seconds:g}",
    ]
