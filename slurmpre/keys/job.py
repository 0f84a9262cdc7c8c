"""The spec keys of the job itself: its name and command, its nodes and GPUs, its Slurm
options, its folders, its launcher, and how it watches for a notice."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from slurmpre import defaults, launchers
from slurmpre.keys.key import REQUIRED, Key, key, table
from slurmpre.launchers import Launcher
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
    checkpoint_dir: str = key("", 'path', '`/home/<user>/checkpoints/<name>`',
        'on the shared volume; created by `submit`. A path key: `~` and `$VAR` expand at submit '
        '(see "Variables" below)',
        flag='--checkpoint-dir', kind='text', writes='always', joined=True,
        help="the job's checkpoint folder (shared volume)",
        convert='path',
    )
    log_dir: str = key("", 'path', '`<checkpoint_dir>/logs`',
        'the appended job log `<name>-<jobid>.out` and one log per attempt; a path key',
    )
    launcher: Launcher = key(launchers.DEFAULT, 'launcher', '`"torchrun"`',
        "Which launcher slurmpre starts on every node, given this allocation's machines, node "
        'rank, processes and a c10d rendezvous on node 0. `"torchrun"`: plain scripts, DDP, '
        "FSDP, and DeepSpeed scripts (`deepspeed.initialize()` reads torchrun's environment). "
        '`"accelerate"`: `accelerate launch` (scripts built on `Accelerator`, the Hugging Face '
        'Trainer with an Accelerate config): `--num_machines`, `--machine_rank`, '
        '`--num_processes`, `--main_process_ip/port` and the rendezvous come from the '
        'allocation; FSDP, DeepSpeed and precision from `accelerate_config`, else your default '
        '`accelerate config` (without either, more than one process is DDP). `"plain"`: the '
        "command runs once per node, with `MASTER_ADDR` (node 0's address as Slurm knows it), "
        '`MASTER_PORT`, `NODE_RANK`, `RANK`, `WORLD_SIZE` (nodes), `LOCAL_RANK=0` and '
        '`LOCAL_WORLD_SIZE=1` set unless the job sets them, so a script that calls '
        '`init_process_group()` itself meets the other nodes. A command that starts a launcher '
        'of its own (`torchrun`, `python -m torch.distributed.run`, `accelerate launch`, '
        '`deepspeed`, `srun`, `mpirun`, `mpiexec`; also after `env` or a path) is refused, '
        'naming the key to use: it would run a launcher inside a launcher, or reach nodes '
        "over ssh (DeepSpeed's) or through MPI instead of through slurmpre's allocation",
        flag='--launcher', kind='choice', writes='always', choices=launchers.NAMES,
        help=(
            'torchrun: one torchrun per node, c10d rendezvous on node 0 (default); '
            'accelerate: one `accelerate launch` per node, the same rendezvous; plain: '
            'COMMAND once per node'
        ),
    )
    nproc_per_node: int | None = key(None, 'whole_or_auto', 'GPUs on the node, else 1',
        'torchrun processes per node',
        flag='--nproc-per-node', kind='count', writes='set',
        help='torchrun processes per node (default: the GPUs Slurm gave the node, else 1)',
        bounds=(1, 1_024),
    )
    env: Mapping[str, str] = key({}, 'env', '`{}`',
        'variables exported in the script; `$VAR` and `${VAR}` in a value expand on the node as '
        'the job starts, `$$` is a `$` (see "Variables" below). Names bash keeps (`_`, `IFS`, '
        '`UID`, `BASH*`, ...) and the `SLURMPRE_` names slurmpre sets are refused',
    )
    setup: tuple[str, ...] = key((), 'setup', '`[]`',
        'shell lines run before the launch (module loads, venv activation); a failing line '
        'fails the job. They must be whole commands: `submit` and `render` give them to `bash '
        '-n` and refuse an unterminated heredoc (`cat > cfg.yaml <<EOF` without its `EOF`), '
        'quote or block, which would swallow the launch line below them and end the job '
        'COMPLETED without training; the script also fails a job that ends inside the block (an '
        '`exit` there)',
    )
    extra_sbatch: tuple[str, ...] = key((), 'extra_sbatch', '`[]`',
        'more sbatch options, read as sbatch reads an `#SBATCH` line (see "How extra_sbatch is '
        'read" below) and rendered one per line as `--name=value`; an option slurmpre sets '
        'itself is refused however it is spelled, naming the key to use, and so are `--wrap`, '
        '`--parsable`, `--test-only`, `--wait`, and `--container` and every `--container-*` '
        "option (pyxis's `--container-image` among them): they run the batch script itself "
        'inside a container, where `srun` and `scontrol` are missing',
    )
    warn_before_end: int = key(
        defaults.WARN_BEFORE_END, 'whole', "`300` (0 to 65535, Slurm's limit)",
        'seconds: `--signal=USR2@N`, the time-limit warning (0: none)',
        flag='--time-warning', kind='seconds', writes='truthy',
        help="seconds before the time limit that sbatch's --signal warning comes",
        bounds=(0, 65_535), part='watch', attr='time_warning',
    )
    poll_interval: float = key(defaults.POLL_INTERVAL, 'seconds',
        '`5` (0.1 to 3600, and shorter than `preempt_window - safety_margin`)',
        "seconds between the watcher's Slurm queries",
        flag='--poll-interval', kind='seconds', writes='always',
        help="seconds between the watcher's Slurm queries",
        bounds=(0.1, 3_600), part='watch', attr='interval',
    )
    preempt_window: int = key(defaults.PREEMPT_WINDOW, 'whole', '`300` (1 to 86400)',
        'seconds from drain to removal on your provider',
        flag='--window', kind='seconds', writes='always',
        help='seconds from drain to node removal on this provider',
        bounds=(1, 86_400), part='watch', attr='window',
    )
    safety_margin: int = key(defaults.SAFETY_MARGIN, 'whole',
        '`30` (0 to 86400, below `preempt_window`)',
        'requeue anyway this long before the window closes',
        flag='--safety-margin', kind='seconds', writes='always',
        help='requeue anyway this long before the window closes',
        bounds=(0, 86_400), part='watch', attr='margin',
    )
    drain_reason: str | None = key(None, 'pattern', 'any',
        'only drains whose reason matches this regular expression are notices',
        flag='--drain-reason', kind='text', writes='truthy', joined=True,
        help='only drains whose reason matches this regular expression are notices',
        convert='pattern',
    )
    notice_signal: str | None = key(None, 'signal_name', 'none',
        'also send this signal (e.g. `USR1`) to the training processes on a notice, on every '
        'node: the command itself (`launcher = "plain"`) or the launcher\'s workers, never the '
        "launcher nor a whole process group; once sent, the script's exit is its stop on the "
        'notice (the job restarts). With it, frameworks that save on a signal need no slurmpre '
        "line: see [docs/recipes.md](recipes.md) (the HF Trainer's `enable_jit_checkpoint`, "
        "Lightning's `requeue_signal`, NeMo's `PreemptionCallback`, Megatron's "
        '`--exit-signal-handler`, and what each cannot promise). A name, not a number. `KILL` '
        'and `STOP` are refused (they cannot be caught, so nothing could checkpoint on them), '
        "and so is `USR2`, which carries Slurm's time-limit warning",
        flag='--notice-signal', kind='text', writes='truthy', joined=True,
        help='also send this signal (e.g. USR1) to the training processes on a notice',
        convert='signal',
    )
    watch: bool = key(True, 'boolean', '`true`', 'run the watcher',
        flag='--no-watch', kind='switch', writes='off',
        help='no watcher: resume and rendezvous only',
        attr='watching',
    )
    in_place: bool = key(True, 'boolean', '`true`',
        'when a drained node is not the batch host and at least MIN of `nodes` remain, release '
        'it and restart inside the allocation instead of requeuing (see the README\'s "Fast '
        'restart")',
        flag='--no-in-place', kind='switch', writes='off',
        help='always requeue on a drain, never restart inside the allocation',
        part='watch',
    )
    spare_nodes: int = key(0, 'whole', '`0` (0 to 64)',
        'hot spares: the job holds this many nodes beyond `nodes` that do not train. When a '
        'training node drains, a spare takes its place inside the allocation (an in-place '
        'restart from the notice checkpoint on as many nodes as before: the world size does '
        'not change); a spare that drains is released while the training goes on. The batch '
        "host is held as a spare (its drain ends the allocation whether it trains or not, so "
        'every training node can be swapped). Spares cost as much as training nodes: '
        '`slurmpre plan` shows what they cost and save. A lost spare is held again at the '
        'next hand-over. Needs `in_place` and the watcher',
        flag='--spare-nodes', kind='count', writes='changed',
        help='nodes the job holds beyond its training nodes, to take a drained one\'s place',
        bounds=(0, 64), part='watch',
    )
    spare_overlap: bool = key(True, 'boolean', '`true`',
        'with spares, make before break in place: at a drain the next step starts at once on '
        'the spare and the nodes that stay (`srun --overlap`), and a script that asks '
        '`checkpoint_requested()` trains on after its notice checkpoint until that step waits '
        'in `resume_path()`; only the last checkpoint and the hand-over stop the training. '
        'Its start-up shares the staying nodes\' CPUs and memory with the training meanwhile: '
        '`false` starts it once the training has stopped. Only for a script that asks '
        '`resume_path()`',
        flag='--no-spare-overlap', kind='switch', writes='off',
        help='with spares, start the next step only once the training has stopped',
        part='watch',
    )
# fmt: on


JOB: tuple[Key, ...] = table(JobKeys)
