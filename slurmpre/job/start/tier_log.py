"""The tier's lines in the job's log.

The tier's modules log to their own loggers (``logging.getLogger(__name__)``, at info);
the wrapper hears them through one handler that hands each line to its own ``say`` (one
line, ``slurmpre[<job>.<attempt> node <id> <name>]: ...`` on its standard error), as long
as the attempt runs (`run.run_attempt`). Only the modules listed here speak to the job's
log: the transfer's own lines (`slurmpre.tier.transfer`) stay a debugging aid, where they
went before (its warnings to Python's last resort, unprefixed).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

SPEAKING = tuple(
    f"slurmpre.tier.{name}"
    for name in ("flush", "handoff", "in_place", "node", "replica", "salvage")
)


class Said(logging.Handler):
    """Each line, as one call of ``say``."""

    def __init__(self, say: Callable[[str], None]) -> None:
        super().__init__(logging.INFO)
        self.say = say

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.say(record.getMessage())
        except Exception:  # noqa: BLE001 - a line that cannot be written never stops the tier
            self.handleError(record)


def hear(say: Callable[[str], None]) -> Said:
    """From now on the tier's lines go to ``say`` (not to one heard before: one handler)."""
    handler = Said(say)
    for name in SPEAKING:
        logger = logging.getLogger(name)
        for old in [h for h in logger.handlers if isinstance(h, Said)]:
            logger.removeHandler(old)
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    return handler


def stop(handler: Said) -> None:
    """The tier's lines are no longer heard by ``handler``."""
    for name in SPEAKING:
        logger = logging.getLogger(name)
        if handler in logger.handlers:
            logger.removeHandler(handler)
            logger.setLevel(logging.NOTSET)
