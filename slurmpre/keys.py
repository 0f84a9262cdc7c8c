"""Every key of a job spec, in one table: its default, the parser that checks it
(`slurmpre.login.parsers`), the wrapper's option it becomes when the job side needs it
(`slurmpre.job.start.args`, and `slurmpre.login.render.launch_argv` writes it), and its
documentation (docs/spec.md's reference table is `markdown()`). `JobSpec` holds to it (a
test fails when they differ). Both sides import it: it imports nothing of either.
"""

from __future__ import annotations

import enum
import re
import warnings
from dataclasses import dataclass
from typing import Any

from slurmpre import defaults, launchers
from slurmpre.noderange import NodeRange

REQUIRED: Any = object()  # no default: the spec must give it (name and command)


@dataclass(frozen=True)
class Key:
    name: str
    default: Any  # JobSpec's (a mutable one is given as its empty value: {} or ())
    parse: str  # the parser's name in slurmpre.login.parsers.PARSERS
    shown: str  # the default as docs/spec.md shows it
    doc: str  # what it means, as docs/spec.md says it
    flag: str | None = None  # the wrapper's option for it, when the job side needs it
    kind: str = ""  # the wrapper's type: seconds, count, text, switch or choice
    # When the batch script writes the option: always; set (not None); truthy; changed (not
    # the default); off (a switch, when the key is false); elastic_min (a node range's MIN).
    writes: str = ""
    joined: bool = False  # --flag=value (a value may start with "-"), else --flag value
    help: str = ""  # the wrapper's --help line for it
    choices: tuple[str, ...] | None = None

    def written(self, value: Any) -> list[str]:
        """The wrapper's option for the spec's ``value``, as the batch script writes it."""
        if not self.flag:
            return []
        if self.writes == "off":
            return [] if value else [self.flag]
        if self.writes == "elastic_min":
            return [self.flag, str(value.min)] if value.elastic and value.min > 1 else []
        skip = {"set": value is None, "truthy": not value, "changed": value == self.default}
        if skip.get(self.writes, False):
            return []
        text = _text(value)
        return [f"{self.flag}={text}"] if self.joined else [self.flag, text]

    @property
    def wrapper_default(self) -> Any:
        """What the wrapper takes without the option (run by hand)."""
        if self.kind == "switch":
            return False
        if self.writes == "elastic_min":
            return self.default.min
        return _text(self.default) if self.kind == "choice" else self.default


def _text(value: Any) -> str:
    if isinstance(value, enum.Enum):
        return str(value.value)
    return f"{value:g}" if isinstance(value, float) else str(value)


KEYS: tuple[Key, ...] = (
    Key('name', REQUIRED, 'name', "the file's stem",
        'job name; one line, no `/` (it names the checkpoint folder)'),
    Key('command', REQUIRED, 'command', 'required',
        'argv list, or a string split like a shell would (no shell runs it)'),
    Key(
        'nodes', NodeRange(1, 1), 'nodes', '`1`',
        'a count, or an elastic range `"2-4"` (the job starts on MIN free nodes, uses up to '
        'MAX)',
        flag='--min-nodes', kind='count', writes='elastic_min',
        help=(
            "fewest nodes the job trains on (the spec's MIN): an in-place restart needs at "
            'least this many left'
        ),
    ),
    Key('gpus_per_node', 0, 'gpus', '`0` (0 to 1024)',
        '`--gpus-per-node`; also the default processes per node for torchrun. A GPU type as '
        'Slurm writes it: `"h100:8"` (or `gpu_type = "h100"` beside a count) renders '
        '`--gpus-per-node=h100:8`',
    ),
    Key('gpu_type', None, 'gpu_type', 'unset',
        'the GPU type Slurm knows (`h100`: letters, digits, `_.-`), beside a count in '
        '`gpus_per_node` or `gpus`; the same as writing it in their value (`"h100:8"`). It '
        'needs one of them',
    ),
    Key('gpus', 0, 'gpus', '`0` (0 to 1048576)',
        '`--gpus`: GPUs for the whole job, which Slurm spreads over the nodes it gives; with a '
        'type as Slurm writes it (`"h100:16"`, or `gpu_type` beside a count). Give `gpus` or '
        "`gpus_per_node`, not both; `--gpus`/`-G` in `extra_sbatch` is refused with this key's "
        "name. torchrun's processes per node are the GPUs Slurm gave each node",
    ),
    Key('cpus_per_task', None, 'whole_or_auto', 'unset',
        '`--cpus-per-task`',
    ),
    Key('mem', None, 'mem', 'unset',
        '`--mem`',
    ),
    Key('time', None, 'time_limit', 'unset',
        "`--time`, in Slurm's forms (`90`, `4:00:00`, `2-12:00:00`, `UNLIMITED`; `0` is no "
        'limit, as in Slurm) and no longer than Slurm holds (2^31-1 seconds, about 68 years)',
    ),
    Key('partition', None, 'word', 'unset',
        '`--partition`',
    ),
    Key('account', None, 'word', 'unset',
        '`--account`',
    ),
    Key('qos', None, 'word', 'unset',
        '`--qos`',
    ),
    Key('constraint', "preemptible", 'constraint', '`"preemptible"`',
        'a Slurm feature expression; `"standard"` (or your cluster\'s feature) for coordinators',
    ),
    Key('requeue', True, 'boolean', '`true`',
        '`--requeue`; without it a notice still checkpoints but nothing requeues',
    ),
    Key('array', None, 'array', 'unset',
        '`--array`, e.g. `"0-99%16"`; each task keeps its checkpoints in '
        '`<checkpoint_dir>/task-<id>`. Indexes 0 to 4000000 (the most `MaxArraySize` allows), '
        'ranges that run forwards, steps and `%` limits of 1 or more',
    ),
    Key(
        'checkpoint_dir', "", 'path', '`/home/<user>/checkpoints/<name>`',
        'on the shared volume; created by `submit`. A path key: `~` and `$VAR` expand at submit '
        '(see "Variables" below)',
        flag='--checkpoint-dir', kind='text', writes='always', joined=True,
        help="the job's checkpoint folder (shared volume)",
    ),
    Key('log_dir', "", 'path', '`<checkpoint_dir>/logs`',
        'the appended job log `<name>-<jobid>.out` and one log per attempt; a path key',
    ),
    Key(
        'launcher', launchers.DEFAULT, 'launcher', '`"torchrun"`',
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
        '`deepspeed`) is refused, naming the key to use: it would run a launcher inside a '
        "launcher, or (DeepSpeed's) reach nodes over ssh instead of through Slurm",
        flag='--launcher', kind='choice', writes='always', choices=launchers.NAMES,
        help=(
            'torchrun: one torchrun per node, c10d rendezvous on node 0 (default); '
            'accelerate: one `accelerate launch` per node, the same rendezvous; plain: '
            'COMMAND once per node'
        ),
    ),
    Key(
        'nproc_per_node', None, 'whole_or_auto', 'GPUs on the node, else 1',
        'torchrun processes per node',
        flag='--nproc-per-node', kind='count', writes='set',
        help='torchrun processes per node (default: the GPUs Slurm gave the node, else 1)',
    ),
    Key('env', {}, 'env', '`{}`',
        'variables exported in the script; `$VAR` and `${VAR}` in a value expand on the node as '
        'the job starts, `$$` is a `$` (see "Variables" below)',
    ),
    Key('setup', (), 'setup', '`[]`',
        'shell lines run before the launch (module loads, venv activation); a failing line '
        'fails the job. They must be whole commands: `submit` and `render` give them to `bash '
        '-n` and refuse an unterminated heredoc (`cat > cfg.yaml <<EOF` without its `EOF`), '
        'quote or block, which would swallow the launch line below them and end the job '
        'COMPLETED without training; the script also fails a job that ends inside the block (an '
        '`exit` there)',
    ),
    Key('extra_sbatch', (), 'extra_sbatch', '`[]`',
        'more sbatch options, read as sbatch reads an `#SBATCH` line (see "How extra_sbatch is '
        'read" below) and rendered one per line as `--long=value`; an option slurmpre sets '
        'itself is refused however it is spelled, naming the key to use, and so are `--wrap`, '
        '`--parsable`, `--test-only`, `--wait`, and `--container` and every `--container-*` '
        "option (pyxis's `--container-image` among them): they run the batch script itself "
        'inside a container, where `srun` and `scontrol` are missing',
    ),
    Key(
        'warn_before_end', defaults.WARN_BEFORE_END, 'whole', "`300` (0 to 65535, Slurm's limit)",
        'seconds: `--signal=USR2@N`, the time-limit warning (0: none)',
        flag='--time-warning', kind='seconds', writes='truthy',
        help="seconds before the time limit that sbatch's --signal warning comes",
    ),
    Key(
        'poll_interval', defaults.POLL_INTERVAL, 'seconds',
        '`5` (0.1 to 3600, and shorter than `preempt_window - safety_margin`)',
        "seconds between the watcher's Slurm queries",
        flag='--poll-interval', kind='seconds', writes='always',
        help="seconds between the watcher's Slurm queries",
    ),
    Key(
        'preempt_window', defaults.PREEMPT_WINDOW, 'whole', '`300` (1 to 86400)',
        'seconds from drain to removal on your provider',
        flag='--window', kind='seconds', writes='always',
        help='seconds from drain to node removal on this provider',
    ),
    Key(
        'safety_margin', defaults.SAFETY_MARGIN, 'whole',
        '`30` (0 to 86400, below `preempt_window`)',
        'requeue anyway this long before the window closes',
        flag='--safety-margin', kind='seconds', writes='always',
        help='requeue anyway this long before the window closes',
    ),
    Key(
        'drain_reason', None, 'pattern', 'any',
        'only drains whose reason matches this regular expression are notices',
        flag='--drain-reason', kind='text', writes='truthy', joined=True,
        help='only drains whose reason matches this regular expression are notices',
    ),
    Key(
        'notice_signal', None, 'signal_name', 'none',
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
    ),
    Key('watch', True, 'boolean', '`true`', 'run the watcher',
        flag='--no-watch', kind='switch', writes='off',
        help='no watcher: resume and rendezvous only',
    ),
    Key('in_place', True, 'boolean', '`true`',
        'when a drained node is not the batch host and at least MIN of `nodes` remain, release '
        'it and restart inside the allocation instead of requeuing (see the README\'s "Fast '
        'restart")',
        flag='--no-in-place', kind='switch', writes='off',
        help='always requeue on a drain, never restart inside the allocation',
    ),
    Key(
        'restart', defaults.RESTART, 'restart', '`"successor"`',
        'how the job goes on when a notice ends its allocation (and it cannot go on in place): '
        '`"successor"`: the same script as a new job, submitted at the notice with the job\'s '
        'own environment (never written to disk) and without the draining nodes, which starts '
        "as soon as a node is free; this job is made non-requeueable first. The successor's "
        'training starts at once and waits in `slurmpre.resume_path()` until this job has '
        "ended, so its start-up overlaps this job's last steps (a script that never asked "
        '`resume_path()` in this job, or one given `resume_arg`, is launched once this job has '
        'ended instead); a script that asks `slurmpre.checkpoint_requested()` trains on after '
        'its notice checkpoint until the successor waits (or the deadline nears). A refused '
        'submission (a limit, a QOS) falls back to the requeue. `"requeue"`: `scontrol '
        'requeue`, which Slurm starts again only after `cred_expire + 1` (121 s on stock '
        'timings)',
        flag='--restart', kind='choice', writes='changed', joined=True, choices=defaults.RESTARTS,
        help=(
            'successor: submit the same script as a new job that takes over (default); '
            "requeue: scontrol requeue (Slurm's floor of cred_expire + 1 s)"
        ),
    ),
    Key(
        'max_restarts', defaults.MAX_RESTARTS, 'whole', '`100` (0 to 100000)',
        'the run gives up at a restart past this many, counted across its jobs (successors '
        'included; in-place restarts are not counted): the attempt does not train, the ledger '
        'records why (`gave_up`), the job is made non-requeueable and ends with exit 1 '
        '(FAILED). A preemptible node lost a day is about 60 restarts in a two-month run. E.g. '
        '`max_restarts = 20`',
        flag='--max-restarts', kind='count', writes='changed',
        help="give up (exit 1, no requeue) at a restart past this many, across the run's jobs",
    ),
    Key(
        'max_stalled_restarts', defaults.MAX_STALLED_RESTARTS, 'whole', '`3` (0 to 1000; 0: never)',
        'the run also gives up when this many attempts in a row added no checkpoint to the '
        'folder (judged by the folder, whoever writes the checkpoints: slurmpre, a framework, '
        'the script: an attempt that started from the checkpoint that is still the newest, or '
        'never chose one, added none): it cannot progress (a bad node image, a checkpoint that '
        'fails to load, a data error that shows only after a resume), and restarting again '
        'would pay for the same failure. Counted once the attempts before have ended (a '
        'successor looks after its predecessor has). `slurmpre status` shows `gave up` and the '
        "reason on one line; so does the attempt's log (`slurmpre run: error: giving up: the "
        'last 3 attempts committed no checkpoint ...`). E.g. `max_stalled_restarts = 5`',
        flag='--max-stalled-restarts', kind='count', writes='changed',
        help='give up when this many attempts in a row committed no checkpoint (0: never)',
    ),
    Key(
        'resume_arg', None, 'resume_arg', "unset (not `--`, not one of the wrapper's own options)",
        'e.g. `"--resume-from"`: appended with the checkpoint path after a restart',
        flag='--resume-arg', kind='text', writes='truthy', joined=True,
        help='after a restart, append this flag and the checkpoint path to COMMAND',
    ),
    Key(
        'accelerate_config', None, 'accelerate_config', 'unset',
        'with `launcher = "accelerate"`: your Accelerate config file (what `accelerate launch '
        '--config_file` takes: FSDP, DeepSpeed, precision), a path key on the shared volume. '
        "`submit` reads it with the nodes' `python` and Accelerate's own reader (an unknown key "
        'is an error there, not after the job has waited for its nodes), and every node of '
        'every attempt gets `--config_file` with it, checking first that it can read it. The '
        "allocation's topology (`num_machines`, `machine_rank`, `num_processes`, "
        "`main_process_ip/port`) is slurmpre's on the command line, which wins over the file's. "
        'E.g. `accelerate_config = "~/configs/fsdp.yaml"`',
        flag='--accelerate-config', kind='text', writes='truthy', joined=True,
        help='launcher accelerate: its config file (--config_file), on every attempt',
    ),
    Key('snapshot', "none", 'snapshot', '`"none"`',
        'the code every attempt runs. `"none"`: the folder you submitted from, as it is when '
        'the attempt starts (an edit during a two-day job is what the next restart runs). '
        '`"git"`: `submit` copies the files `git` shows in the work tree you submit from '
        "(tracked, a submodule's tracked files too, and untracked but not ignored; links as "
        'links, never followed) once into `<checkpoint_dir>/.slurmpre/code/<hash>/`, and every '
        'attempt, requeues and successors included, starts in that copy, in the folder you '
        'submitted from (`#SBATCH --chdir`; `setup` lines run there too, so give a venv by its '
        'absolute path, or use `python`). The hash (sha256 of paths, modes and contents) names '
        'the copy, and the same code submitted again shares it. `$SLURMPRE_CODE_DIR` is the '
        'copy\'s top folder (e.g. `env = {PYTHONPATH = "$SLURMPRE_CODE_DIR/src"}` for a package '
        'installed with `pip install -e`, which would import from where it was installed). '
        '`--chdir` in `extra_sbatch` is refused with it. In every case the ledger records the '
        'code: `submitted` says what the submit found (`git 1a2b3c4d5e6f`, `(dirty)` when the '
        'work tree differs from that commit: changed, staged or untracked files; `snapshot '
        "3f2a9c1e77d04b12 of git ...`), each attempt's `start` what it ran (without a snapshot, "
        "the folder's commit as the attempt starts), and `slurmpre status` shows it under the "
        'first attempt and wherever it changes. E.g. `snapshot = "git"`',
        choices=defaults.SNAPSHOTS,
    ),
    Key('snapshot_max_mb', defaults.SNAPSHOT_MAX_MB, 'whole', '`200` (1 to 100000)',
        'the most a snapshot may copy, in MB (10^6 bytes): past it `submit` refuses before '
        'copying anything, naming the three largest files (keep data and outputs in '
        '`.gitignore`). E.g. `snapshot_max_mb = 500`',
    ),
    Key(
        'file_access', "owner", 'file_access', '`"owner"`',
        'who may read what slurmpre creates (checkpoint and log folders it makes, checkpoints '
        'it commits, the ledger): `"owner"` (folders 0700, files 0600) or `"group"` (checkpoint '
        'folders 1770, files 0660, the ledger 0640), whatever the umask; what makes a job act '
        '(its script, notices, choices, locks, the snapshot) is 0600 either way '
        '([docs/security.md](security.md))',
        flag='--file-access', kind='choice', writes='changed', joined=True,
        choices=("owner", "group"),
        help='who may read what slurmpre creates: owner (default) or group',
    ),
    Key('python', "", 'path', 'the interpreter running `slurmpre`',
        'the interpreter with slurmpre installed, as the nodes see it; a path key',
    ),
    Key('template', None, 'template', 'the default',
        'your own Jinja template; `{% extends "default.sbatch.j2" %}` and override a block '
        '(`directives`, `environment`, `logs`, `setup`, `launch`)',
    ),
)  # fmt: skip

BY_NAME = {k.name: k for k in KEYS}
# The wrapper's options that are not spec keys (a hand-run wrapper may set them).
WRAPPER_ONLY = (
    Key("agree_timeout", defaults.AGREE_TIMEOUT, "seconds", "", "",
        flag="--agree-timeout", kind="seconds",
        help="seconds the other nodes wait for node 0's checkpoint choice"),
)  # fmt: skip
# The order in which the batch script writes the wrapper's options (the golden files').
WRITTEN = (
    "launcher", "checkpoint_dir", "nproc_per_node", "resume_arg", "accelerate_config",
    "poll_interval", "preempt_window", "safety_margin", "warn_before_end", "drain_reason",
    "notice_signal", "watch", "nodes", "restart", "in_place", "file_access", "max_restarts",
    "max_stalled_restarts",
)  # fmt: skip


def wrapper_options() -> tuple[Key, ...]:
    """Every option of the wrapper: the spec's keys it needs, then its own."""
    return tuple(k for k in KEYS if k.flag) + WRAPPER_ONLY


# Every word the wrapper takes as an option of its own (a resume_arg may not be one).
FLAGS = frozenset(str(k.flag) for k in wrapper_options()) | {"--help", "-h"}


def pattern(text: str) -> re.Pattern[str]:
    """``text`` compiled as a regular expression; ValueError saying why it is not one."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # "possible nested set": still valid
            return re.compile(text)
    except re.error as exc:
        raise ValueError(f"is not a regular expression ({exc})") from None


def markdown() -> str:
    """docs/spec.md's reference table."""
    rows = ["| key | default | meaning |", "|---|---|---|"]
    for k in KEYS:
        rows.append(f"| `{k.name}` | {k.shown} | {k.doc} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":  # python -m slurmpre.keys: docs/spec.md's table, to paste
    print(markdown(), end="")
