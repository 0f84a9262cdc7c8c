"""The Slurm facts of the running job, read from an environment mapping."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from slurmpre import environment
from slurmpre.errors import JobEnvironmentError
from slurmpre.folder.layout import AttemptFiles, FolderLayout, attempt_key
from slurmpre.slurm.hostlist import expand


def _int(env: Mapping[str, str], key: str, default: int | None = None) -> int:
    raw = env.get(key, "")
    if raw == "":
        if default is None:
            raise JobEnvironmentError(f"{key} is not set: is this running under srun in a job?")
        return default
    try:
        return int(raw.split("(")[0])
    except ValueError:
        raise JobEnvironmentError(f"{key}={raw!r} is not a number") from None


@dataclass(frozen=True)
class JobEnv:
    job_id: str
    restart_count: int  # 0 on the first run (Slurm leaves SLURM_RESTART_COUNT unset then)
    node_id: int  # this node's index in the allocation
    nodes: tuple[str, ...]  # the nodes of this attempt, in Slurm's order
    node_name: str
    gpus_on_node: int
    array_job_id: str | None = None
    array_task_id: str | None = None
    in_place: int = 0  # restarts inside this allocation so far (SLURMPRE_IN_PLACE)
    batch_host: str | None = None  # where the batch script's supervisor runs, when one does
    predecessor: str | None = None  # the job this one takes over from (SLURMPRE_PREDECESSOR)
    earlier_restarts: int = 0  # the run's restarts in the jobs before this one
    allocation: tuple[str, ...] = ()  # the job's nodes, the step's and the spares (`spares`)
    releasing: tuple[str, ...] = ()  # drained nodes the job releases once the step before ends
    port_offset: int = 0  # added to the rendezvous port (SLURMPRE_PORT_OFFSET)

    def __post_init__(self) -> None:
        if not self.allocation:  # a step on the whole job
            object.__setattr__(self, "allocation", self.nodes)

    @property
    def spares(self) -> tuple[str, ...]:
        """The nodes the job holds that this step does not train on (`spare_nodes`): only
        under the batch script's supervisor, which alone runs a step on part of the job."""
        if self.batch_host is None:
            return ()
        return tuple(n for n in self.allocation if n not in self.nodes)

    @property
    def run_restarts(self) -> int:
        """The run's restarts so far, across the jobs that took over from one another."""
        return self.earlier_restarts + self.restart_count

    @property
    def num_nodes(self) -> int:
        return len(self.nodes)

    @property
    def is_first_node(self) -> bool:
        return self.node_id == 0

    @property
    def restarted(self) -> bool:
        return self.restart_count > 0

    @property
    def attempt(self) -> str:
        """This attempt's name in file names: ``3``, or ``3.1`` after one in-place restart."""
        return attempt_key(self.restart_count, self.in_place)

    def files(self, folder: Path) -> AttemptFiles:
        """This attempt's control files under the checkpoint folder ``folder``."""
        return AttemptFiles(FolderLayout(folder), self.tag, self.attempt)

    @property
    def tag(self) -> str:
        """The job as a person names it: ``123`` or ``120_3`` for an array task."""
        if self.array_job_id and self.array_task_id:
            return f"{self.array_job_id}_{self.array_task_id}"
        return self.job_id


def _gpus(env: Mapping[str, str]) -> int:
    if env.get("SLURM_GPUS_ON_NODE"):
        return _int(env, "SLURM_GPUS_ON_NODE")
    visible = env.get("CUDA_VISIBLE_DEVICES", "")
    return len([d for d in visible.split(",") if d.strip()]) if visible else 0


def read_job_env(env: Mapping[str, str]) -> JobEnv:
    """SLURM_* variables -> JobEnv; a clear error outside a job step."""
    job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    if not job_id:
        raise JobEnvironmentError("not inside a Slurm job (SLURM_JOB_ID is not set)")
    # A step's own nodes first: after an in-place restart, or with spare nodes, a step
    # runs on part of the allocation, and SLURM_NODEID counts within the step.
    whole = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
    nodes = tuple(expand(env.get("SLURM_STEP_NODELIST") or whole))
    # A step started early (`handover.overlap`): the drained nodes it replaces are not its
    # job's any more, though Slurm lists them until the step before it has ended.
    releasing = tuple(n for n in env.get(environment.RELEASING, "").split(",") if n)
    name = env.get("SLURMD_NODENAME") or (nodes[0] if nodes else "")
    if not nodes:
        raise JobEnvironmentError("SLURM_JOB_NODELIST is not set: is this running inside a job?")
    node_id = _int(env, "SLURM_NODEID", default=nodes.index(name) if name in nodes else 0)
    return JobEnv(
        job_id=job_id,
        restart_count=_int(env, "SLURM_RESTART_COUNT", default=0),
        node_id=node_id,
        nodes=nodes,
        node_name=name,
        gpus_on_node=_gpus(env),
        array_job_id=env.get("SLURM_ARRAY_JOB_ID") or None,
        array_task_id=env.get("SLURM_ARRAY_TASK_ID") or None,
        in_place=_int(env, environment.IN_PLACE, default=0),
        batch_host=env.get(environment.BATCH_HOST) or None,
        predecessor=env.get(environment.PREDECESSOR) or None,
        earlier_restarts=_int(env, environment.EARLIER_RESTARTS, default=0),
        allocation=tuple(n for n in expand(whole) if n not in releasing) if whole else (),
        releasing=releasing,
        port_offset=_int(env, environment.PORT_OFFSET, default=0),
    )
