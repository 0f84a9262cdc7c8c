"""The spec keys of what runs, and who may read it: the resume flag, the Accelerate
config, the code snapshot, file access, the interpreter and the template."""

from __future__ import annotations

from dataclasses import dataclass

from slurmpre import defaults
from slurmpre.keys.key import Key, key, table


# fmt: off
@dataclass(frozen=True, kw_only=True)
class CodeKeys:
    resume_arg: str | None = key(
        None, 'resume_arg', "unset (not `--`, not one of the wrapper's own options)",
        'e.g. `"--resume-from"`: appended with the checkpoint path after a restart',
        flag='--resume-arg', kind='text', writes='truthy', joined=True,
        help='after a restart, append this flag and the checkpoint path to COMMAND',
    )
    accelerate_config: str | None = key(None, 'accelerate_config', 'unset',
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
        convert='config_file',
    )
    local_dir: str = key("off", 'local_dir', '`"off"`',
        'where `slurmpre.checkpoint()` writes first, on each node: `"off"` (straight into the '
        'checkpoint folder), `"auto"` (the node\'s `$SLURMPRE_NODE_LOCAL_DIR`, else '
        '`/dev/shm`), or an absolute path on the node (`$VAR` read there, e.g. '
        '`"$TMPDIR"`). The save then costs a local copy; each node\'s wrapper copies it into '
        'the checkpoint folder in the background and node 0 commits it there whole (saves '
        'that come faster than the shared volume takes them are skipped, the newest kept). '
        'A folder that is missing, not writable, nearly full or on the checkpoint folder\'s '
        'volume is said in one line and the checkpoint folder is used. E.g. '
        '`local_dir = "auto"`',
        flag='--local-dir', kind='text', writes='changed', joined=True,
        help='where checkpoint() writes first on each node: off, auto or a path',
        convert='or_default',
    )
    snapshot: str = key("none", 'snapshot', '`"none"`',
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
    )
    snapshot_max_mb: int = key(defaults.SNAPSHOT_MAX_MB, 'whole', '`200` (1 to 100000)',
        'the most a snapshot may copy, in MB (10^6 bytes): past it `submit` refuses before '
        'copying anything, naming the three largest files (keep data and outputs in '
        '`.gitignore`). E.g. `snapshot_max_mb = 500`',
        bounds=(1, 100_000),
    )
    file_access: str = key("owner", 'file_access', '`"owner"`',
        'who may read what slurmpre creates (checkpoint and log folders it makes, checkpoints '
        'it commits, the ledger): `"owner"` (folders 0700, files 0600) or `"group"` (checkpoint '
        'folders 1770, files 0660, the ledger 0640), whatever the umask; what makes a job act '
        '(its script, notices, choices, locks, the snapshot) is 0600 either way '
        '([docs/security.md](security.md))',
        flag='--file-access', kind='choice', writes='changed', joined=True,
        choices=("owner", "group"),
        help='who may read what slurmpre creates: owner (default) or group',
        convert='access',
    )
    python: str = key("", 'path', 'the interpreter running `slurmpre`',
        'the interpreter with slurmpre installed, as the nodes see it, and what the launcher '
        'runs (torch for `torchrun`, accelerate for `accelerate`): `submit` checks both in '
        'one run of it; a path key',
    )
    template: str | None = key(None, 'template', 'the default',
        'your own Jinja template; `{% extends "default.sbatch.j2" %}` and override a block '
        '(`directives`, `environment`, `logs`, `setup`, `launch`)',
    )
# fmt: on


CODE: tuple[Key, ...] = table(CodeKeys)
