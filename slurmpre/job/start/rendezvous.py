"""The launcher's command line from the Slurm facts: one c10d rendezvous every node agrees on.

torchrun, or Accelerate's ``accelerate launch`` (which runs torch.distributed.run
itself, with the user's Accelerate config for FSDP, DeepSpeed and precision).
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from slurmpre.errors import UsageError
from slurmpre.launchers import PYTHON

# Outside Linux's ephemeral range (32768-60999) and Slurm's own ports.
PORT_BASE = 20000
PORT_SPAN = 10000
PORT_BAND = 1000  # a cluster's band when it sets an offset


def port_for(job_id: str, in_place: int = 0, offset: int = 0) -> int:
    """The rendezvous port: derived from the job id, so every node computes the same one.
    A step after an in-place restart starts seconds after the last one's store closed on
    the same host: it takes another port rather than race that socket's release.
    ``offset`` (SLURMPRE_PORT_OFFSET): clusters whose nodes share a host (the sandboxes
    side by side) each keep to a band of ``PORT_BAND`` ports from it."""
    digits = re.sub(r"\D", "", job_id) or "0"
    if offset:
        return PORT_BASE + (offset + (int(digits) + in_place * 4099) % PORT_BAND) % PORT_SPAN
    return PORT_BASE + (int(digits) + in_place * 4099) % PORT_SPAN


@dataclass(frozen=True)
class Rendezvous:
    host: str  # node 0's address as Slurm knows it
    port: int
    run_id: str  # unique per attempt
    nnodes: int
    nproc_per_node: int
    node_rank: int

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def is_host(self) -> bool:
        return self.node_rank == 0


def _launch(
    command: Sequence[str],
    *,
    module: str,
    program: list[str],
    flags: tuple[str, str],
    package: str,
) -> tuple[list[str], list[str], list[str]]:
    """The launcher for the user's command, how it takes it, and the command itself.

    ``python train.py`` runs under that same interpreter's launcher module;
    ``python -m pkg`` keeps the module (``flags[0]``); ``train.py`` uses the launcher
    program on PATH; any other program runs without python (``flags[1]``).
    """
    name = program[0]
    if not command:
        raise UsageError("no command to run after --")
    first = command[0]
    if PYTHON.fullmatch(Path(first).name):
        rest = list(command[1:])
        if not rest:
            raise UsageError(f"command {first!r} names no script to run under {name}")
        if rest[0] == "-m":
            return [first, "-m", module], [flags[0]], rest[1:]
        return [first, "-m", module], [], rest
    found = shutil.which(name)
    if found is None:
        raise UsageError(
            f"{name} is not on PATH (install {package}, or start the command with python)"
        )
    mode = [] if first.endswith(".py") else [flags[1]]
    return [found, *program[1:]], mode, list(command)


def torchrun_argv(command: Sequence[str], rdzv: Rendezvous) -> list[str]:
    """``torchrun [rendezvous options] SCRIPT ARGS`` for the user's command (`_launch`)."""
    launcher, mode, target = _launch(
        command, module="torch.distributed.run", program=["torchrun"],
        flags=("-m", "--no-python"), package="torch",
    )  # fmt: skip
    options = [
        f"--nnodes={rdzv.nnodes}",
        f"--nproc-per-node={rdzv.nproc_per_node}",
        f"--node-rank={rdzv.node_rank}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={rdzv.endpoint}",
        f"--rdzv-id={rdzv.run_id}",
        # Every node here may share one address: say which one hosts the store.
        f"--rdzv-conf=is_host={'true' if rdzv.is_host else 'false'}",
        # A failed worker ends the attempt; Slurm's requeue is the restart.
        "--max-restarts=0",
    ]
    # "--": the script's own options are its own. torchrun's parser abbreviates, so
    # without it a script's `--log` is "ambiguous option: --log could match --log-dir,
    # ..." and the job fails before it starts.
    return [*launcher, *options, *mode, "--", *target]


def accelerate_argv(
    command: Sequence[str], rdzv: Rendezvous, env: Mapping[str, str], config: str | None = None
) -> list[str]:
    """``accelerate launch [machines, ranks, rendezvous] SCRIPT ARGS`` for the user's command.

    The topology goes on the command line, which wins over a config file's values; what
    to run as (DDP, FSDP, DeepSpeed, precision) is the user's Accelerate config:
    ``config``, else the default one; without either, more than one process is plain DDP.
    """
    launcher, mode, target = _launch(
        command, module="accelerate.commands.launch", program=["accelerate", "launch"],
        flags=("--module", "--no_python"), package="accelerate",
    )  # fmt: skip
    processes = rdzv.nnodes * rdzv.nproc_per_node
    options = []
    if config is not None:
        options += ["--config_file", config]
    elif processes > 1 and accelerate_config(env) is None:
        options.append("--multi_gpu")  # accelerate's torch.distributed.run path
    options += [
        f"--num_machines={rdzv.nnodes}",
        f"--machine_rank={rdzv.node_rank}",
        f"--num_processes={processes}",
        f"--main_process_ip={rdzv.host}",
        f"--main_process_port={rdzv.port}",
        "--max_restarts=0",  # a failed worker ends the attempt; Slurm's requeue restarts
    ]
    if rdzv.nnodes > 1:
        options += [
            "--rdzv_backend=c10d",
            f"--rdzv_conf=is_host={'true' if rdzv.is_host else 'false'}",
        ]
    return [*launcher, *options, *mode, *target]


def accelerate_config(env: Mapping[str, str]) -> Path | None:
    """The default config file `accelerate launch` reads, if the user made one (where
    Accelerate looks: $HF_HOME, else $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface)."""
    home = env.get("HF_HOME") or str(
        Path(env.get("XDG_CACHE_HOME") or Path(env.get("HOME") or "~", ".cache"), "huggingface")
    )
    folder = Path(home).expanduser() / "accelerate"
    for name in ("default_config.yaml", "default_config.json"):
        if (folder / name).is_file():
            return folder / name
    return None
