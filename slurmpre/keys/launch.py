"""The spec keys of how the job starts on its nodes: its folders, its launcher, its
environment, its setup, and the sbatch options beside slurmpre's."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from slurmpre import launchers
from slurmpre.keys.key import Key, key, table
from slurmpre.launchers import Launcher


# fmt: off
@dataclass(frozen=True, kw_only=True)
class LaunchKeys:
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
# fmt: on


LAUNCH: tuple[Key, ...] = table(LaunchKeys)
