"""The sandbox's shape and the Slurm configuration files it writes (pure functions)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurmpre import environment
from slurmpre.defaults import PREEMPTIBLE_FEATURE
from slurmpre.errors import UsageError
from slurmpre.sandbox.instance import FIRST, Instance

MARKER = "# Managed by `slurmpre sandbox`: rewritten by `sandbox up`, do not edit."
STANDARD_FEATURE = "standard"
GPUS_PER_NODE = 2


SHM = Path("/dev/shm")


@dataclass(frozen=True)
class NodeSpec:
    name: str
    preemptible: bool
    port: int


@dataclass(frozen=True)
class Timings:
    """How fast a failure or a requeue is handled: ``tuned`` for fast tests, ``stock``
    (Slurm's defaults) for benchmarks. See docs/sandbox.md ("Timings")."""

    name: str
    cred_expire: int | None  # AuthInfo=cred_expire; a requeued job waits this long + 1 s
    scheduler_parameters: str | None
    slurmd_timeout: int
    slurmctld_timeout: int
    message_timeout: int
    kill_wait: int

    def lines(self) -> list[str]:
        out = []
        if self.cred_expire is not None:
            out.append(f"AuthInfo=cred_expire={self.cred_expire}")
        if self.scheduler_parameters:
            out.append(f"SchedulerParameters={self.scheduler_parameters}")
        out += [
            f"SlurmdTimeout={self.slurmd_timeout}",
            f"SlurmctldTimeout={self.slurmctld_timeout}",
            f"MessageTimeout={self.message_timeout}",
            f"KillWait={self.kill_wait}",
        ]
        return out


TUNED = Timings("tuned", 5, "bf_interval=1,sched_interval=2", 10, 10, 10, 5)
STOCK = Timings("stock", None, None, 300, 120, 10, 30)


@dataclass(frozen=True)
class Tracking:
    """How slurmd tracks a job's processes and binds them to CPUs (docs/sandbox.md): both
    bind with task/affinity, so a launch that forgets ``--cpus-per-task`` shows up here."""

    name: str
    proctrack: str  # ProctrackType=proctrack/<this>
    task_plugin: str  # TaskPlugin=<this>


CGROUP = Tracking("cgroup", "cgroup", "task/affinity,task/cgroup")
PGID = Tracking("pgid", "pgid", "task/affinity")
TRACKINGS = {t.name: t for t in (CGROUP, PGID)}


@dataclass(frozen=True)
class Topology:
    """A node's CPUs as the host has them (``slurmd -C``): task/affinity binds by cores, so
    a node declared only as ``CPUs=N`` would bind differently from a real GPU node."""

    sockets: int
    cores_per_socket: int
    threads_per_core: int

    @property
    def cpus(self) -> int:
        return self.sockets * self.cores_per_socket * self.threads_per_core

    def line(self) -> str:
        return (
            f"CPUs={self.cpus} Sockets={self.sockets} CoresPerSocket={self.cores_per_socket} "
            f"ThreadsPerCore={self.threads_per_core}"
        )


def parse_topology(text: str) -> Topology:
    """``slurmd -C`` output -> the host's topology (a clear error when it has none)."""
    fields = dict(re.findall(r"(\w+)=(\S+)", text))
    try:
        sockets = int(fields.get("SocketsPerBoard", "0")) * int(fields.get("Boards", "1"))
        return Topology(sockets, int(fields["CoresPerSocket"]), int(fields["ThreadsPerCore"]))
    except (KeyError, ValueError):
        raise UsageError(
            f"cannot read the CPU topology from `slurmd -C`: {text.strip()!r}"
        ) from None


@dataclass(frozen=True)
class SandboxConfig:
    hostname: str
    state_dir: Path
    version: tuple[int, int, int]
    nodes: tuple[NodeSpec, ...]
    timings: Timings = TUNED
    tracking: Tracking = CGROUP
    topology: Topology = Topology(1, 2, 1)
    # Per-user RPC rate limiting (Slurm 23.02+): "rl_enable" and its options, or None.
    rate_limit: str | None = None
    # Expedited requeue allowed (Slurm 25.11+): "enable_expedited_requeue", or None.
    expedite: str | None = None
    instance: Instance = FIRST  # which of this machine's sandboxes

    @property
    def ctld_parameters(self) -> str:
        return ",".join(p for p in (self.rate_limit, self.expedite) if p)

    @property
    def spool_root(self) -> Path:
        return self.state_dir / "spool"

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "log"

    @property
    def dev_dir(self) -> Path:
        return self.state_dir / "dev"

    def node(self, name: str) -> NodeSpec:
        for n in self.nodes:
            if n.name == name:
                return n
        known = ", ".join(n.name for n in self.nodes)
        raise UsageError(f"unknown sandbox node {name!r} (nodes: {known})")

    def spool_dir(self, node: str) -> Path:
        return self.spool_root / node

    @property
    def local_root(self) -> Path:
        """Where the nodes' own folders lie: in RAM (/dev/shm, which a root sees through
        its /dev) as a node's /dev/shm or local disk is another volume than the shared
        one; on the state's disk on a host without it."""
        if SHM.is_dir():
            return SHM / f"slurmpre-{self.instance.cluster_name}"
        return self.state_dir / "local"

    def local_dir(self, node: str) -> Path:
        """The node's own folder (a node-local disk): its jobs find it in
        ``$SLURMPRE_NODE_LOCAL_DIR``, which `render_task_prolog` sets."""
        return self.local_root / node

    @property
    def task_prolog(self) -> Path:
        return self.state_dir / "task-prolog"

    def gpu_files(self, node: str) -> list[Path]:
        return [self.dev_dir / f"{node}-gpu{i}" for i in range(GPUS_PER_NODE)]


def node_specs(total: int, preemptible: int, instance: Instance = FIRST) -> tuple[NodeSpec, ...]:
    """Provider-style names: ``gpu-preemptible-dp-N`` for preemptible, ``gpu-dp-N`` for
    standard (numbered from 1 in sandbox 0, from 101 in sandbox 1, and so on)."""
    if total < 1:
        raise UsageError(f"--nodes must be at least 1, got {total}")
    if total > 64:
        raise UsageError(f"--nodes {total} is more than this one-machine sandbox runs (64 at most)")
    if preemptible < 0:
        raise UsageError(f"--preemptible must be 0 or more, got {preemptible}")
    if preemptible > total:
        raise UsageError(f"--preemptible {preemptible} is larger than --nodes {total}")
    specs = [
        NodeSpec(f"gpu-preemptible-dp-{instance.node_number(i)}", True, instance.node_port(i))
        for i in range(preemptible)
    ]
    specs += [
        NodeSpec(f"gpu-dp-{instance.node_number(i)}", False, instance.node_port(preemptible + i))
        for i in range(total - preemptible)
    ]
    return tuple(specs)


def render_slurm_conf(cfg: SandboxConfig) -> str:
    """slurm.conf for a cluster whose every node runs on this host (multiple-slurmd)."""
    d = cfg.state_dir
    lines = [
        MARKER,
        f"ClusterName={cfg.instance.cluster_name}",
        f"SlurmctldHost={cfg.hostname}",
        f"SlurmctldPort={cfg.instance.ctld_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"StateSaveLocation={d / 'state'}",
        f"SlurmdSpoolDir={cfg.spool_root}/%n",
        f"SlurmctldPidFile={d / 'run' / 'slurmctld.pid'}",
        f"SlurmdPidFile={d / 'run' / 'slurmd-%n.pid'}",
        f"SlurmctldLogFile={cfg.log_dir / 'slurmctld.log'}",
        f"SlurmdLogFile={cfg.log_dir / 'slurmd-%n.log'}",
        f"TaskProlog={cfg.task_prolog}",
        f"ProctrackType=proctrack/{cfg.tracking.proctrack}",
        f"TaskPlugin={cfg.tracking.task_plugin}",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "SchedulerType=sched/backfill",
        "MailProg=/bin/true",
        # A live node set DOWN returns to service as soon as its slurmd answers.
        "ReturnToService=2",
        # Keep finished jobs visible for 5 minutes: there is no accounting here.
        "MinJobAge=300",
        # Requeue only the jobs that ask for it with --requeue, as on the provider.
        "JobRequeue=0",
        "CommunicationParameters=NoInAddrAny",
        # Several slurmd on one host, each declaring the same CPUs as a GPU node would.
        "SlurmdParameters=config_overrides",
        "GresTypes=gpu",
        *cfg.timings.lines(),
    ]
    if cfg.ctld_parameters:
        lines.append(f"SlurmctldParameters={cfg.ctld_parameters}")
    for n in cfg.nodes:
        feature = PREEMPTIBLE_FEATURE if n.preemptible else STANDARD_FEATURE
        lines.append(
            f"NodeName={n.name} NodeHostname={cfg.hostname} NodeAddr=127.0.0.1 Port={n.port} "
            f"{cfg.topology.line()} RealMemory=4096 Gres=gpu:{GPUS_PER_NODE} "
            f"Features={feature} State=UNKNOWN"
        )
    lines.append("PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def render_task_prolog(cfg: SandboxConfig) -> str:
    """Every task (a batch script, each srun task) starts behind it, on its node, as its
    user: slurmstepd puts the ``export NAME=value`` lines it prints into the task's
    environment, as a site exports a node's local scratch. Here: the node's own folder,
    and the rendezvous ports of this sandbox's jobs, apart from the other sandboxes' on
    this host (whatever environment the job was submitted from)."""
    return (
        f"#!/bin/sh\n{MARKER}\n"
        f"printf 'export {environment.NODE_LOCAL_DIR}=%s/%s\\n' "
        f'{shlex.quote(str(cfg.local_root))} "$SLURMD_NODENAME"\n'
        f"echo 'export {environment.PORT_OFFSET}={cfg.instance.port_offset}'\n"
    )


def render_gres_conf(cfg: SandboxConfig) -> str:
    """Stand-in GPUs: character devices equal to /dev/null, so --gpus-per-node works."""
    lines = [MARKER]
    for n in cfg.nodes:
        files = cfg.dev_dir / f"{n.name}-gpu[0-{GPUS_PER_NODE - 1}]"
        lines.append(f"NodeName={n.name} Name=gpu File={files}")
    return "\n".join(lines) + "\n"


def render_cgroup_conf(cfg: SandboxConfig) -> str | None:
    """cgroup.conf: cgroup v1 with cores confined, or (24.05+, which always starts a
    cgroup plugin in slurmd) the plugin disabled when processes are tracked by pgid.
    Devices are not confined: the stand-in GPUs are /dev/null, which every job needs."""
    if cfg.tracking is CGROUP:
        return (
            f"{MARKER}\nCgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\n"
            "ConstrainCores=yes\nConstrainDevices=no\nConstrainRAMSpace=no\n"
        )
    if cfg.version < (24, 5, 0):
        return None
    return f"{MARKER}\nCgroupPlugin=disabled\n"


RATE_LIMIT_SINCE = (23, 2, 0)
EXPEDITE_SINCE = (25, 11, 0)


def expedite_parameter(wanted: bool, version: tuple[int, int, int]) -> str | None:
    """``--expedited-requeue`` -> SlurmctldParameters (25.11 and later only)."""
    if not wanted:
        return None
    if version < EXPEDITE_SINCE:
        raise UsageError(
            f"--expedited-requeue: Slurm {'.'.join(map(str, version))} has none (it came in "
            "25.11): use --slurm 26.05"
        )
    return "enable_expedited_requeue"


def rate_limit_parameters(spec: str, version: tuple[int, int, int]) -> str:
    """``--rate-limit`` -> SlurmctldParameters: ``on`` (Slurm's defaults: a bucket of 30
    tokens refilled by 2 a second), or ``BUCKET/REFILL`` (tokens, tokens a second)."""
    if version < RATE_LIMIT_SINCE:
        raise UsageError(
            f"--rate-limit {spec}: Slurm {'.'.join(map(str, version))} has no per-user rate "
            "limiting (rl_enable came in 23.02): use --slurm 24.11 or 26.05"
        )
    if spec == "on":
        return "rl_enable"
    bucket, sep, refill = spec.partition("/")
    if not (sep and bucket.isdigit() and refill.isdigit() and int(bucket) > 0 and int(refill) > 0):
        raise UsageError(f"--rate-limit {spec!r}: give on, or BUCKET/REFILL such as 30/2")
    return f"rl_enable,rl_bucket_size={int(bucket)},rl_refill_rate={int(refill)}"


@dataclass
class State:
    """What ``up`` started, as written to ``sandbox.json``."""

    version: list[int]
    timings: str
    nodes: list[dict[str, Any]]  # name, preemptible, port, pid
    slurmctld: int | None = None
    munged: int | None = None  # None: munge was already running and is not ours
    helpers: list[int] = field(default_factory=list)
    tracking: str = PGID.name  # sandboxes recorded before tracking was a choice ran pgid
    root: str | None = None  # a Debian root the Slurm daemons run in (None: the host's Slurm)
    suite: str | None = None  # that root's Debian suite
    rate_limit: str | None = None  # `up --rate-limit`: "on" or "BUCKET/REFILL"; None: off
    expedite: bool = False  # `up --expedited-requeue`
    instance: int = 0  # which of this machine's sandboxes (`instance.Instance`)
    # `up --shared-dir`: dir, mbps (None: no cap), backing, pid (`asked.SharedDir.record`)
    shared: dict[str, Any] | None = None

    def config(self, state_dir: Path, hostname: str) -> SandboxConfig:
        return SandboxConfig(
            hostname=hostname,
            state_dir=state_dir,
            version=(self.version[0], self.version[1], self.version[2]),
            nodes=tuple(NodeSpec(n["name"], n["preemptible"], n["port"]) for n in self.nodes),
            timings=STOCK if self.timings == "stock" else TUNED,
            tracking=TRACKINGS.get(self.tracking, PGID),
            instance=Instance(self.instance),
        )
