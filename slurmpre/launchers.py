"""The launchers slurmpre starts on every node, and the launchers it refuses to start a
second time inside the first: every fact about launchers, once.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from enum import Enum
from pathlib import PurePosixPath


class Launcher(str, Enum):
    """What slurmpre starts on every node: ``torchrun`` (the default), ``accelerate
    launch``, or the command itself (``plain``)."""

    TORCHRUN = "torchrun"
    ACCELERATE = "accelerate"
    PLAIN = "plain"

    @property
    def needs(self) -> str | None:
        """The module the nodes' python must import for this launcher (pip installs it by
        the same name: torchrun is torch.distributed.run, accelerate launch is
        accelerate.commands.launch), or None: checked at submit (`slurmpre.login.submit`)."""
        return {Launcher.TORCHRUN: "torch", Launcher.ACCELERATE: "accelerate"}.get(self)


NAMES = tuple(launcher.value for launcher in Launcher)
DEFAULT = Launcher.TORCHRUN

# What ``plain`` sets for the command on every node (unless the job sets it), so a script
# that calls ``init_process_group()`` itself meets the other nodes: node 0's address and
# the port, this node's rank, the nodes, one process per node.
PLAIN_ENV = (
    "MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "RANK", "WORLD_SIZE", "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
)  # fmt: skip

# A python interpreter by the name a command gives it (python, python3, python3.11, pypy3).
PYTHON = re.compile(r"(?:python|pypy)[0-9.]*", re.ASCII)


_LAUNCHERS = {
    "torchrun": "torchrun",
    "accelerate": "accelerate",
    "accelerate-launch": "accelerate",
    "deepspeed": "deepspeed",
    "srun": "srun",
    "mpirun": "mpirun",
    "orterun": "mpirun",
    "mpiexec": "mpiexec",
    "mpiexec.hydra": "mpiexec",
}
_LAUNCHER_MODULES = {
    "torch.distributed.run": "torchrun",
    "torch.distributed.launch": "torchrun",
    "accelerate.commands.launch": "accelerate",
    "accelerate": "accelerate",
    "deepspeed": "deepspeed",
    "deepspeed.launcher.runner": "deepspeed",
}


# A command that starts a launcher of its own: slurmpre starts the launcher on every node
# with this allocation's machines, ranks and rendezvous; the key that asks for it.
NESTED = {
    "torchrun": "starts torchrun, a launcher of its own: slurmpre starts torchrun on every "
    "node with the job's rendezvous. Give the script itself (python train.py ...) with "
    "launcher = 'torchrun', the default",
    "accelerate": "starts accelerate launch, a launcher of its own: slurmpre starts it on "
    "every node with the job's machines, ranks and rendezvous. Give the script itself "
    "(python train.py ...) with launcher = 'accelerate', and its --config_file as "
    "accelerate_config = 'PATH'",
    "deepspeed": "starts the deepspeed launcher, which reaches other nodes over ssh, not "
    "through Slurm. Give the script itself (python train.py ...) with launcher = "
    "'torchrun': deepspeed.initialize() reads torchrun's environment",
    "srun": "starts srun: slurmpre already runs one task per node under srun and starts the "
    "launcher there (launcher = 'torchrun', the default). Give the script itself "
    "(python train.py ...), or launcher = 'plain' to run it as is, once per node",
    **{
        mpi: f"starts {mpi}, an MPI launcher that reaches the nodes itself: slurmpre starts one "
        "launcher per node (launcher = 'torchrun', the default). Give the script itself "
        "(python train.py ...), or launcher = 'plain' to run it as is, once per node, with "
        "MASTER_ADDR, RANK and WORLD_SIZE set"
        for mpi in ("mpirun", "mpiexec")
    },
}


def own(command: Sequence[str]) -> str | None:
    """The launcher a command starts by itself (``torchrun``, ``accelerate``, ``deepspeed``,
    ``python -m torch.distributed.run``, ``srun``, ``mpirun``, ``mpiexec``), or None.
    Read through what only runs the next word (``env`` with its settings, ``nice``), and
    python's own flags (``-u``, ``-X opt``, ``-mtorch.distributed.run``)."""
    words = list(command)
    while words and PurePosixPath(words[0]).name in _PASS_THROUGH:
        words = _after_pass_through(words)
    if not words:
        return None
    first = PurePosixPath(words[0]).name
    if first in _LAUNCHERS:
        return _LAUNCHERS[first]
    if not PYTHON.fullmatch(first):
        return None
    rest = words[1:]
    while rest and rest[0].startswith("-") and rest[0] != "-":
        flag = rest.pop(0)
        if flag.startswith("-m"):
            module = flag[2:] or (rest[0] if rest else "")
            return _LAUNCHER_MODULES.get(module)
        if flag in ("-c", "--"):
            return None
        if flag in ("-X", "-W", "--check-hash-based-pycs") and rest:
            rest.pop(0)
    return None


_PASS_THROUGH = frozenset({"env", "nice", "nohup", "exec", "command", "stdbuf", "taskset"})


def _after_pass_through(words: list[str]) -> list[str]:
    """What a pass-through command (``env A=1 -u X``, ``nice -n 5``) runs next."""
    name, rest = PurePosixPath(words[0]).name, words[1:]
    takes_value = {
        "env": {"-u", "--unset", "-C", "--chdir", "-S", "--split-string"},
        "nice": {"-n", "--adjustment"},
    }
    valued = takes_value.get(name, set())
    while rest:
        word = rest[0]
        if name == "env" and "=" in word and not word.startswith("-"):
            rest.pop(0)
        elif name == "taskset" and not word.startswith("-") and len(rest) > 1:
            rest.pop(0)  # the CPU mask
            break
        elif word.startswith("-") and word != "-":
            rest.pop(0)
            if word in valued and rest:
                rest.pop(0)
        else:
            break
    return rest
