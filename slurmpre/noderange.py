"""``nodes``: how many nodes a job runs on, a count or an elastic range."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NodeRange:
    """``nodes``: a count (MIN = MAX) or an elastic range."""

    min: int
    max: int

    def __str__(self) -> str:
        return str(self.min) if self.min == self.max else f"{self.min}-{self.max}"

    @property
    def elastic(self) -> bool:
        return self.min != self.max
