"""`slurmpre.lines.sent_to`: the lines a caller asked for, once each, and no one else's."""

from __future__ import annotations

import logging
import threading

import pytest
from slurmpre.lines import sent_to

NAME = "slurmpre.tests_lines"


def test_a_line_goes_to_the_caller_once_and_a_background_threads_does_not() -> None:
    log = logging.getLogger(f"{NAME}.module")
    said: list[str] = []
    with sent_to(said.append, NAME):
        log.info("here %s", "one")
        other = threading.Thread(target=log.info, args=("from another thread",))
        other.start()
        other.join()
        log.debug("not a line")
    log.info("after")
    assert said == ["here one"]


def test_the_root_logger_sees_none_of_them_while_sent_and_all_is_as_it_was_after(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = logging.getLogger(f"{NAME}_root")  # a logger no other test has sent
    before = (log.level, log.propagate)
    said: list[str] = []
    with caplog.at_level(logging.INFO), sent_to(said.append, log.name):
        log.info("once")  # not twice, as with --debug's handler on the root
        with sent_to(None, log.name):  # the Python API without say=: nothing changes
            log.info("twice")
    assert said == ["once", "twice"]
    assert caplog.records == []
    assert (log.level, log.propagate) == before
    with caplog.at_level(logging.INFO):
        log.info("the caller's own logging again")
    assert [r.getMessage() for r in caplog.records] == ["the caller's own logging again"]
