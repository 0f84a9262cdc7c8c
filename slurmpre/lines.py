"""What slurmpre tells a person, as log records: whoever starts the work sends the lines of
the modules it answers for where it wants them with `sent_to` (docs/architecture.md);
nothing else shows them, as logging drops INFO that no one asked for.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator

_LOCK = threading.Lock()
# For each logger sent somewhere: how many `sent_to` hold it, and its settings before.
_HELD: dict[str, tuple[int, int, bool]] = {}


class _Lines(logging.Handler):
    """Each line one thread says (the message as it was written), to ``write``."""

    def __init__(self, write: Callable[[str], None], thread: int | None) -> None:
        super().__init__(logging.INFO)
        self.write, self.thread = write, thread

    def emit(self, record: logging.LogRecord) -> None:
        if self.thread is None or record.thread == self.thread:
            try:
                self.write(record.getMessage())
            except Exception:  # noqa: BLE001 - a line that cannot be written stops no work
                self.handleError(record)


@contextlib.contextmanager
def sent_to(
    write: Callable[[str], None] | None, *modules: str, every_thread: bool = False
) -> Iterator[None]:
    """While inside, what ``modules`` (logger names: a module, or a package and its
    modules; none inside another) say on this thread goes to ``write``, line by line,
    and nowhere else: a background thread's lines (a preemption replayed beside a
    drill) are not this caller's, and none reaches the root logger twice. With
    ``every_thread``, every thread's lines (the wrapper's: the tier's flush and pulls run
    in threads of its own). With no ``write``, they are left to the caller's own logging."""
    if write is None:
        yield
        return
    handler = _Lines(write, None if every_thread else threading.get_ident())
    loggers = [logging.getLogger(name) for name in modules]
    for logger in loggers:
        _hold(logger)
        logger.addHandler(handler)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
            _release(logger)


def _hold(logger: logging.Logger) -> None:
    with _LOCK:
        held, level, propagate = _HELD.get(logger.name, (0, logger.level, logger.propagate))
        _HELD[logger.name] = (held + 1, level, propagate)
        if not held:
            logger.setLevel(level if logging.NOTSET < level <= logging.INFO else logging.INFO)
            logger.propagate = False


def _release(logger: logging.Logger) -> None:
    with _LOCK:
        held, level, propagate = _HELD.pop(logger.name)
        if held > 1:
            _HELD[logger.name] = (held - 1, level, propagate)
        else:
            logger.setLevel(level)
            logger.propagate = propagate
