"""The one way into the job side: ``python -m slurmpre.job`` (what the batch script runs)
and the ``slurmpre run`` console command both come through ``main``.

Slurm's time-limit warning (``--signal``) goes to the whole job step, and its default
action kills: the latch that keeps it must be in place before anything else is
imported. Callers import this module with nothing heavy before it (slurmpre's package
``__init__`` imports nothing; the console command chooses this path before it imports
click), and hand over the arguments after the program name.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping, Sequence

from slurmpre.signals import WARN_SIGNAL, Latch


def main(argv: Sequence[str], env: Mapping[str, str] | None = None) -> int:
    """``steps ...`` (the batch script's supervisor of steps) or ``run ...`` (the wrapper).
    ``env``: the process's environment (None: read here, the one place the job side reads
    it; everything after is handed this mapping)."""
    environ = os.environ if env is None else env
    warning = Latch()
    signal.signal(WARN_SIGNAL, warning)
    try:
        if list(argv[:1]) == ["steps"]:
            from slurmpre.job.handover.steps import main as steps

            return steps(list(argv), environ)
        from slurmpre.job.start.run import main as run  # after the handler, on purpose

        return run(list(argv), environ, warning=warning)
    finally:
        # While Python exits it puts back the default action of every signal it handled:
        # a warning arriving then killed the task (exit 140, the job FAILED) just as the
        # training ended. Ignored, that action is left alone to the last instant.
        signal.signal(WARN_SIGNAL, signal.SIG_IGN)
