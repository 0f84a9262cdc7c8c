"""Which of this machine's sandboxes (0-9, ``$SLURMPRE_SANDBOX``): the number that sets its
folder, ports, node names, cluster name and configuration folder. See docs/sandbox.md
("Several sandboxes side by side"); what they share is in `sharing`.

Node names differ between sandboxes because several slurmd on one host keep their cgroups
under ``slurm_<node>`` and job ids start at 1 in every cluster: two clusters with the
same node names would share job cgroups.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from slurmpre import environment
from slurmpre.errors import UsageError

STATE_ROOT = Path("/var/lib/slurmpre")
SLURM_ETC = Path("/etc/slurm")  # where Slurm reads its configuration, on the host and in a root
MAX = 9  # sandboxes 0-9
CTLD_PORT = 6817  # sandbox 0's; sandbox n's is 100 n higher, its nodes' ports follow it
PORT_STEP = 100  # so up to 99 nodes a sandbox (64 at most: config.node_specs)
PORT_OFFSET_STEP = 1000  # its jobs' rendezvous ports (`job.start.rendezvous.port_for`)
STATE_FILE = "sandbox.json"  # in its state folder: what `up` started (`config.State`)


@dataclass(frozen=True)
class Instance:
    number: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.number <= MAX:
            raise UsageError(f"sandbox {self.number}: give a number from 0 to {MAX}")

    @property
    def suffix(self) -> str:
        return "" if self.number == 0 else str(self.number)

    @property
    def state_dir(self) -> Path:
        return STATE_ROOT / f"sandbox{self.suffix}"

    @property
    def cluster_name(self) -> str:
        return f"sandbox{self.suffix}"

    @property
    def ctld_port(self) -> int:
        return CTLD_PORT + PORT_STEP * self.number

    def node_port(self, index: int) -> int:
        """The port of the node ``index`` (0-based, over all its nodes)."""
        return self.ctld_port + 1 + index

    def node_number(self, index: int) -> int:
        """The number in the name of a node of one kind (``index`` 0-based in that kind)."""
        return PORT_STEP * self.number + index + 1

    @property
    def port_offset(self) -> int:
        """Its jobs' rendezvous ports are in a band of their own (`port_for`); sandbox 0's
        too, for its jobs run beside the others' (an offset of 0 is a real cluster's)."""
        return PORT_OFFSET_STEP * (self.number + 1)

    @property
    def etc(self) -> Path:
        """Its configuration folder as the daemons see it (on the host, or in a root)."""
        return SLURM_ETC if self.number == 0 else SLURM_ETC / self.cluster_name

    @property
    def conf(self) -> Path:
        return self.etc / "slurm.conf"


FIRST = Instance(0)  # the one a user brings up


def from_env(env: Mapping[str, str]) -> Instance:
    """The sandbox ``$SLURMPRE_SANDBOX`` names (0 when unset); one line when it is bad."""
    raw = env.get(environment.SANDBOX, "").strip()
    if not raw:
        return FIRST
    if not raw.isdigit():
        raise UsageError(f"{environment.SANDBOX}={raw!r}: give a number from 0 to {MAX}")
    return Instance(int(raw))


def state_dir_of(env: Mapping[str, str]) -> Path:
    """Where the chosen sandbox keeps its state (``$SLURMPRE_SANDBOX_DIR`` overrides)."""
    given = env.get(environment.SANDBOX_DIR, "")
    return Path(given) if given else from_env(env).state_dir


def sandbox_env(instance: Instance) -> dict[str, str]:
    """What a process (and the jobs it submits) needs to reach this sandbox's Slurm, and
    its jobs' rendezvous ports apart from other sandboxes' (every node is this host, and
    job ids start at 1 in each)."""
    return {
        environment.SANDBOX: str(instance.number),
        "SLURM_CONF": str(instance.conf),
        environment.PORT_OFFSET: str(instance.port_offset),
    }
