"""The spec keys of how a job watches for a notice and meets it: the time-limit warning,
the watcher's pace, the provider's window, in-place restarts and spares."""

from __future__ import annotations

from dataclasses import dataclass

from slurmpre import defaults
from slurmpre.keys.key import Key, key, table


# fmt: off
@dataclass(frozen=True, kw_only=True)
class WatchKeys:
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


WATCH: tuple[Key, ...] = table(WatchKeys)
