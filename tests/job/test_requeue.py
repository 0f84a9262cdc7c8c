"""The requeue decision after a notice, as a table."""

from __future__ import annotations

import pytest
from slurmpre.job.watch.decide import (
    AFTER_CHECKPOINT,
    STILL_STARTING,
    Action,
    Facts,
    decide,
)


def facts(**kw: object) -> Facts:
    base: dict[str, object] = {
        "listening": True,
        "taken": False,
        "committed": False,
        "since_commit": None,
        "exit_code": None,
        "past_deadline": False,
        "exit_grace": 5.0,
    }
    return Facts(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kw", "action", "why"),
    [
        ({}, Action.WAIT, ""),
        ({"committed": True, "since_commit": 0.0}, Action.REQUEUE, AFTER_CHECKPOINT),
        ({"listening": False, "committed": True, "since_commit": 1.0}, Action.WAIT, ""),
        ({"listening": False, "committed": True, "since_commit": 5.0}, Action.REQUEUE, None),
        ({"past_deadline": True}, Action.REQUEUE, "deadline inside the window"),
        # Still starting: it listened in an earlier attempt, not yet in this one.
        ({"listening": False, "listened_before": True}, Action.REQUEUE, STILL_STARTING),
        ({"listening": True, "listened_before": True}, Action.WAIT, ""),
        ({"listening": False, "listened_before": False}, Action.WAIT, ""),
        # Exit 0 without taking the notice: its work is done, whatever it saved last.
        ({"exit_code": 0}, Action.SKIP, "the training finished its work after the notice"),
        ({"exit_code": 0, "committed": True}, Action.SKIP, None),
        ({"exit_code": 0, "listening": False, "committed": True}, Action.SKIP, None),
        ({"exit_code": 0, "past_deadline": True}, Action.SKIP, None),
        # It stopped on the notice, or failed: requeue at once.
        ({"exit_code": 0, "taken": True, "committed": True}, Action.REQUEUE, AFTER_CHECKPOINT),
        (
            {"exit_code": 0, "taken": True},
            Action.REQUEUE,
            "the training exited (0) after the notice",
        ),
        ({"exit_code": 137}, Action.REQUEUE, "the training exited (137) after the notice"),
    ],
)
def test_decide(kw: dict[str, object], action: Action, why: str | None) -> None:
    decision = decide(facts(**kw))
    assert decision.action is action
    if why is not None:
        assert decision.why == why
