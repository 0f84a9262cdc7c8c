"""The ``slurmpre`` console command: ``slurmpre run ...`` goes to the job side's entry
(the time-limit latch first, no click); everything else to the click command line."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["run"]:
        from slurmpre.job.start.entry import main as job

        return job(args)
    from slurmpre.cli import main as cli

    return cli(args)
