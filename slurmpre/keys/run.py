"""The spec keys of the run across its jobs: how it goes on after a notice, and when it
stops restarting."""

from __future__ import annotations

from dataclasses import dataclass

from slurmpre import defaults
from slurmpre.keys.key import Key, key, table


# fmt: off
@dataclass(frozen=True, kw_only=True)
class RunKeys:
    restart: str = key(defaults.RESTART, 'restart', '`"successor"`',
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
        part='watch',
    )
    grow: bool = key(True, 'boolean', '`true`',
        'grow back: a job with a node range (`nodes = "2-4"`) that runs on fewer than MAX '
        'nodes hands over to a bigger successor once idle preemptible nodes have stayed idle '
        'for `grow_settle` seconds and it would gain at least `grow_min_gain` of them (never '
        'past MAX, never while a checkpoint is being written). When the idle nodes alone can '
        'hold the bigger job, it starts while this one trains (make before break) and this '
        'one checkpoints once it waits; otherwise this one checkpoints at once and the bigger '
        "job starts on its nodes and the idle ones, with a twin of the script's own shape "
        'held a little longer in case the idle nodes are taken meanwhile. It watches through '
        'the shared drain board: no Slurm query of its own. Needs `restart = "successor"`. '
        '`grow = false`: the job keeps the nodes it started on',
        flag='--grow-to', kind='count', writes='elastic_max',
        help='grow back onto idle preemptible nodes, up to this many (the MAX of the range)',
        bounds=(1, 100_000), part='watch', attr='grow_to',
    )
    grow_settle: float = key(defaults.GROW_SETTLE, 'seconds', '`10` (0 to 86400)',
        'seconds a preemptible node must stay idle before a job grows onto it: a node that '
        'appears and vanishes is not chased',
        flag='--grow-settle', kind='seconds', writes='changed',
        help='seconds a node must stay idle before the job grows onto it',
        bounds=(0, 86_400), part='watch',
    )
    grow_min_gain: int = key(1, 'whole', '`1` (1 to 100000)',
        'the fewest nodes a grow must add: a hand-over costs a checkpoint and a restart, so '
        'a big job may ask for more than one node before it moves',
        flag='--grow-min-gain', kind='count', writes='changed',
        help='the fewest nodes a grow must add',
        bounds=(1, 100_000), part='watch',
    )
    max_restarts: int = key(defaults.MAX_RESTARTS, 'whole', '`100` (0 to 100000)',
        'the crash budget: the run gives up at a restart past this many after a failure (the '
        'training exited with an error), counted across its jobs (successors included; '
        'in-place restarts are not counted; preemptions are counted apart, in '
        '`max_preemptions`, and restarts the ledger cannot explain count here): the attempt '
        'does not train, the ledger '
        'records why (`gave_up`), the job is made non-requeueable and ends with exit 1 '
        '(FAILED). A preemptible node lost a day is about 60 restarts in a two-month run. E.g. '
        '`max_restarts = 20`',
        flag='--max-restarts', kind='count', writes='changed',
        help="give up (exit 1, no requeue) at a restart past this many, across the run's jobs",
        bounds=(0, 100_000), part='limits',
    )
    max_stalled_restarts: int = key(
        defaults.MAX_STALLED_RESTARTS, 'whole', '`3` (0 to 1000; 0: never)',
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
        bounds=(0, 1_000), part='limits',
    )
    max_preemptions: int | None = key(None, 'optional_whole', 'unset: no limit (0 to 100000)',
        'the preemption budget, counted apart from `max_restarts`: the run gives up (as '
        '`max_restarts` says) at a restart past this many preemptions (drains the watcher saw, '
        'and nodes removed under it). A crash never counts here and a preemption never counts '
        'in `max_restarts`. With a deadline or `fallback_after`, the run moves to standard nodes '
        'instead of giving up. E.g. `max_preemptions = 50`',
        flag='--max-preemptions', kind='count', writes='set',
        help='give up (or move to standard nodes) at a restart past this many preemptions',
        bounds=(0, 100_000), part='goals',
    )
    deadline: str | None = key(None, 'deadline', 'unset',
        'when the run must be done: an ISO 8601 time (`"2026-12-10T18:00"`, the login '
        "node's local time unless it has an offset: `\"...+01:00\"`, `\"...Z\"`; `submit` pins "
        "a time without one to the login node's offset, so every node reads the same instant) "
        'or a duration '
        'from the first submission of the name into its checkpoint folder (`"90m"`, `"8h"`, '
        '`"2d"`, `"1d12h"`). A run with a deadline may use standard nodes when it must: at each '
        'hand-over slurmpre decides (Uniform Progress with a safety net: '
        '[docs/deadlines.md](deadlines.md)) whether the next job waits for preemptible nodes '
        'or runs on standard ones, and goes back when they return and the slack allows; the '
        'decision and its inputs are in the ledger and `slurmpre status`. It needs '
        '`total_steps` (or an integration that knows the run\'s length) and `restart = '
        '"successor"`; a time already past is refused at submit',
        flag='--deadline', kind='text', writes='set', joined=True,
        help='when the run must be done (ISO 8601 time, or a duration from the first submit)',
        part='goals', convert='deadline',
    )
    total_steps: int | None = key(None, 'optional_whole', 'unset (1 to 10^15)',
        "the step the run must reach: with `deadline`, progress is the ledger's steps against "
        'it, at the rate the ledger measured. E.g. `total_steps = 100000`',
        flag='--total-steps', kind='count', writes='set',
        help='the step the run must reach (for the deadline)',
        bounds=(1, 10**15), part='goals',
    )
    fallback_after: int | None = key(None, 'optional_whole', 'unset (1 to 100000)',
        'move to standard nodes after this many preemptions, with or without a deadline; the '
        'run stays there (without a deadline) or goes back when the deadline allows',
        flag='--fallback-after', kind='count', writes='set',
        help='move to standard nodes after this many preemptions',
        bounds=(1, 100_000), part='goals',
    )
    max_wait: float | None = key(None, 'duration', 'unset (1 s to 366 days)',
        'move to standard nodes when the run has waited this long for preemptible ones: '
        'seconds or a duration (`"30m"`, `"2h"`)',
        flag='--max-wait', kind='seconds', writes='set',
        help='move to standard nodes after waiting this many seconds for preemptible ones',
        bounds=(1, 366 * 86_400), part='goals', attr='max_wait_s',
    )
    max_cost: float | None = key(None, 'money', 'unset (0.01 to 10^12)',
        "the run's budget in the prices' currency (`slurmpre status`'s `cost`: node-hours held "
        'times the price of their kind, at the default prices): once the run has cost this '
        'much, it starts no other attempt (it gives up, recording why, as `max_restarts` '
        'does); the attempt that runs is not cut short. E.g. `max_cost = 5000`',
        flag='--max-cost', kind='seconds', writes='set',
        help="stop before the run's cost passes this (the prices' currency)",
        bounds=(0.01, 1e12), part='goals',
    )
# fmt: on


RUN: tuple[Key, ...] = table(RunKeys)
