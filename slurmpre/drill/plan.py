"""When the drill preempts: a schedule of `Moment`s drawn from a seed, the same for every
run it compares. With three or more preemptions, at least one of each kind; the order is
shuffled. See docs/drill.md ("What it does", 4).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

KINDS = ("startup", "checkpoint", "training")


@dataclass(frozen=True)
class Moment:
    kind: str
    after: int = 0  # training: steps into the attempt before the drain

    def describe(self) -> str:
        if self.kind == "training":
            return f"after {self.after} steps of an attempt"
        return "during start-up" if self.kind == "startup" else "while a checkpoint is written"


def schedule(count: int, seed: int, *, shortest: int = 3, longest: int = 25) -> list[Moment]:
    """``count`` moments drawn from ``seed``: equal seeds, equal schedules."""
    rng = random.Random(seed)
    kinds = ["startup", "checkpoint"] if count >= 3 else []
    kinds += [rng.choice(KINDS) for _ in range(count - len(kinds))]
    rng.shuffle(kinds)
    return [
        Moment(kind, rng.randint(shortest, longest) if kind == "training" else 0) for kind in kinds
    ]
