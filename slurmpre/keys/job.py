"""The spec keys of what Slurm is asked for: the job's name and command, its nodes and
GPUs, its Slurm options."""

from __future__ import annotations

from dataclasses import dataclass

from slurmpre.keys.key import REQUIRED, Key, key, table
from slurmpre.noderange import NodeRange


# fmt: off
@dataclass(frozen=True, kw_only=True)
class JobKeys:
    name: str = key(REQUIRED, 'name', "the file's stem",
        'job name; one line, no `/` (it names the checkpoint folder)')
    command: tuple[str, ...] = key(REQUIRED, 'command', 'required',
        'argv list, or a string split like a shell would (no shell runs it). `$NAME` and '
        "`${NAME}` in an argument expand on every node as the job starts, from the "
        "training's environment (the job's, with slurmpre's own such as "
        '`$SLURMPRE_CHECKPOINT_DIR`), as in double quotes: each argument stays one, nothing '
        'else is read, `$$` is a `$`. Another `$` is refused at submit; a variable nothing '
        'is known to set (not slurmpre\'s, Slurm\'s, in `env`, nor where you submit) is a '
        'warning; one unset on the node stops the run at its start (exit 2, no restart)')
    nodes: NodeRange = key(NodeRange(1, 1), 'nodes', '`1`',
        'a count, or an elastic range `"2-4"` (the job starts on MIN free nodes, uses up to '
        'MAX)',
        flag='--min-nodes', kind='count', writes='elastic_min',
        help=(
            "fewest nodes the job trains on (the spec's MIN): an in-place restart needs at "
            'least this many left'
        ),
        bounds=(1, 100_000), part='watch', attr='min_nodes',
    )
    gpus_per_node: int = key(0, 'gpus', '`0` (0 to 1024)',
        '`--gpus-per-node`; also the default processes per node for torchrun. A GPU type as '
        'Slurm writes it: `"h100:8"` (or `gpu_type = "h100"` beside a count) renders '
        '`--gpus-per-node=h100:8`',
        bounds=(0, 1_024),
    )
    gpu_type: str | None = key(None, 'gpu_type', 'unset',
        'the GPU type Slurm knows (`h100`: letters, digits, `_.-`), beside a count in '
        '`gpus_per_node` or `gpus`; the same as writing it in their value (`"h100:8"`). It '
        'needs one of them',
    )
    gpus: int = key(0, 'gpus', '`0` (0 to 1048576)',
        '`--gpus`: GPUs for the whole job, which Slurm spreads over the nodes it gives; with a '
        'type as Slurm writes it (`"h100:16"`, or `gpu_type` beside a count). Give `gpus` or '
        "`gpus_per_node`, not both; `--gpus`/`-G` in `extra_sbatch` is refused with this key's "
        "name. torchrun's processes per node are the GPUs Slurm gave each node",
        bounds=(0, 1_048_576),
    )
    cpus_per_task: int | None = key(None, 'whole_or_auto', 'unset',
        '`--cpus-per-task`',
        bounds=(1, 65_536),
    )
    mem: str | None = key(None, 'mem', 'unset',
        '`--mem`',
    )
    time: str | None = key(None, 'time_limit', 'unset',
        "`--time`, in Slurm's forms (`90`, `4:00:00`, `2-12:00:00`, `UNLIMITED`; `0` is no "
        'limit, as in Slurm) and no longer than Slurm holds (2^31-1 seconds, about 68 years)',
    )
    partition: str | None = key(None, 'word', 'unset',
        '`--partition`',
    )
    account: str | None = key(None, 'word', 'unset',
        '`--account`',
    )
    qos: str | None = key(None, 'word', 'unset',
        '`--qos`',
    )
    constraint: str | None = key("preemptible", 'constraint', '`"preemptible"`',
        'a Slurm feature expression; `"standard"` (or your cluster\'s feature) for coordinators',
    )
    requeue: bool = key(True, 'boolean', '`true`',
        '`--requeue`; without it a notice still checkpoints but nothing requeues',
    )
    array: str | None = key(None, 'array', 'unset',
        '`--array`, e.g. `"0-99%16"`; each task keeps its checkpoints in '
        '`<checkpoint_dir>/task-<id>`. Indexes 0 to 4000000 (the most `MaxArraySize` allows), '
        'ranges that run forwards, steps and `%` limits of 1 or more',
    )
# fmt: on


JOB: tuple[Key, ...] = table(JobKeys)
