"""The spec keys of the run across its jobs: how it goes on after a notice, and when it
stops restarting."""

from __future__ import annotations

from slurmpre import defaults
from slurmpre.keys.key import Key

RUN: tuple[Key, ...] = (
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
)  # fmt: skip
