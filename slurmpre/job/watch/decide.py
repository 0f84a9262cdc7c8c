"""When to requeue after a notice: one pure decision over what the watcher knows.

The rules, in order:

1. The training exited. Exit 0 without having taken the notice (its
   `preemption_requested()` never answered True) means it finished its work:
   never requeue, whatever it saved last. Any other exit after a notice
   (it stopped on the notice, or failed) requeues now.
2. The deadline inside the window has passed: requeue now.
3. The attempt is still starting: its script asked `preemption_requested()` in an
   earlier attempt but not yet in this one, so it has trained no step since it
   resumed from the newest complete checkpoint. Nothing to save, nothing to wait
   for: requeue now, not at the deadline. Not when a successor was submitted at the
   notice: it takes over once this one ends, and this one may train until then.
4. A script that goes on after its notice checkpoint (it asks
   `checkpoint_requested()`, and a successor is on its way) is waited for until it
   is told to stop (the watcher does that) and exits, or the deadline passes.
5. A checkpoint committed after the notice: a script that listens is requeued
   at once (that is its notice checkpoint); one that does not listen gets
   ``exit_grace`` seconds to exit, since its commit may be its final save.
6. Otherwise wait.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Action(str, Enum):
    WAIT = "wait"
    REQUEUE = "requeue"
    SKIP = "skip"


@dataclass(frozen=True)
class Facts:
    listening: bool  # the script asks preemption_requested()
    taken: bool  # ... and it answered True: the script stops on the notice
    committed: bool  # a checkpoint that answers the notice has committed
    since_commit: float | None  # seconds since that commit was seen
    exit_code: int | None  # the training's exit code, once it has exited
    past_deadline: bool
    exit_grace: float
    listened_before: bool = False  # an earlier attempt's script asked preemption_requested()
    goes_on: bool = False  # it trains on after its notice checkpoint, not yet told to stop
    handed_over: bool = False  # a successor is on its way (submitted at the notice)


@dataclass(frozen=True)
class Decision:
    action: Action
    why: str = ""


AFTER_CHECKPOINT = "after the just-in-time checkpoint"
STILL_STARTING = "nothing to save: the attempt is still starting (no step trained since it resumed)"


def decide(facts: Facts) -> Decision:
    if facts.exit_code is not None:
        if facts.exit_code == 0 and not facts.taken:
            return Decision(Action.SKIP, "the training finished its work after the notice")
        if facts.committed:
            return Decision(Action.REQUEUE, AFTER_CHECKPOINT)
        return Decision(Action.REQUEUE, f"the training exited ({facts.exit_code}) after the notice")
    if facts.past_deadline:
        return Decision(Action.REQUEUE, "deadline inside the window")
    # With a successor on its way there is no floor to save: this one trains meanwhile.
    starting = facts.listened_before and not facts.listening and not facts.committed
    if starting and not facts.handed_over:
        return Decision(Action.REQUEUE, STILL_STARTING)
    if facts.goes_on:
        return Decision(Action.WAIT)
    if facts.committed:
        if facts.listening:
            return Decision(Action.REQUEUE, AFTER_CHECKPOINT)
        if facts.since_commit is not None and facts.since_commit >= facts.exit_grace:
            return Decision(Action.REQUEUE, AFTER_CHECKPOINT)
    return Decision(Action.WAIT)
