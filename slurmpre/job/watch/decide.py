"""When to requeue after a notice: one pure decision over what the watcher knows.

The rules that need their reason: an exit 0 without having taken the notice is the end
of the training's work, never requeued whatever it saved last; an attempt whose script
listened in an earlier attempt but not yet in this one has trained no step since it
resumed, so it has nothing to save and is requeued at once (unless a successor,
submitted at the notice, lets it train until it ends); a script that does not listen
gets ``exit_grace`` seconds after a commit to exit, since that commit may be its final
save.
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
