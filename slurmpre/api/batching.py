"""What a training keeps when its world size changes: the global batch (`batching`), and
the data order (`ElasticSampler`: one stream keyed on the samples consumed). See
docs/how-it-works.md, "When the world size changes".
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurmpre import arguments
from slurmpre.api.attempt import ranks
from slurmpre.errors import CheckpointError, UsageError
from slurmpre.reading import SMALL, read_regular

SAMPLER_FILE = "sampler.json"  # in a checkpoint slurmpre commits: where the data order is


@dataclass(frozen=True)
class Batching:
    global_batch: int
    micro_batch: int
    world_size: int

    @property
    def accumulation(self) -> int:
        """Micro batches per rank per optimizer step."""
        return self.global_batch // (self.micro_batch * self.world_size)

    @property
    def per_rank(self) -> int:
        """Samples per rank per optimizer step."""
        return self.global_batch // self.world_size


def batching(global_batch: int, micro_batch: int, world_size: int | None = None) -> Batching:
    """Keep ``global_batch`` samples per optimizer step on ``world_size`` ranks (this job's,
    by default) with micro batches of ``micro_batch``: the accumulation steps; a UsageError
    naming what to change when the global batch cannot be met exactly."""
    arguments.count("global_batch", global_batch)
    arguments.count("micro_batch", micro_batch)
    arguments.count("world_size", world_size, optional=True)
    world = world_size if world_size is not None else ranks()[1]
    for name, value in (("global_batch", global_batch), ("micro_batch", micro_batch),
                        ("world_size", world)):  # fmt: skip
        if value < 1:
            raise UsageError(f"{name}={value}: must be 1 or more")
    if global_batch % world:
        raise UsageError(
            f"global_batch={global_batch} cannot be split over {world} ranks: it is not a "
            f"multiple of the world size (nearest that are: {_near(global_batch, world)})"
        )
    share = global_batch // world
    if share % micro_batch:
        fits = [m for m in range(1, share + 1) if share % m == 0]
        best = min(fits, key=lambda m: (abs(m - micro_batch), -m))
        raise UsageError(
            f"global_batch={global_batch} on {world} ranks is {share} samples per rank, not a "
            f"multiple of micro_batch={micro_batch}: use micro_batch={best} (or a global "
            f"batch that is a multiple of {micro_batch * world})"
        )
    return Batching(global_batch, micro_batch, world)


def _near(value: int, step: int) -> str:
    low = value - value % step
    return f"{low} or {low + step}" if low else f"{low + step}"


class ElasticSampler:
    """This rank's indices into a dataset of ``size`` samples, in micro batches, from
    ``consumed`` samples on (docs/how-it-works.md). Iterating gives the micro batches of
    the optimizer steps that start in the current epoch; call `advance` after each
    optimizer step, and keep `state_dict` with the checkpoint."""

    def __init__(
        self,
        size: int,
        global_batch: int,
        micro_batch: int,
        *,
        seed: int = 0,
        shuffle: bool = True,
        consumed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        arguments.count("size", size)
        arguments.count("consumed", consumed)
        arguments.count("seed", seed)
        arguments.count("rank", rank, optional=True)
        arguments.flag("shuffle", shuffle)
        if size < 1 or consumed < 0:
            raise UsageError(
                f"size={size}, consumed={consumed}: size 1 or more, consumed 0 or more"
            )
        if (rank is None) != (world_size is None):
            raise UsageError("give rank and world_size together, or neither (this job's)")
        here, world = ranks() if rank is None else (rank, world_size or 1)
        self.batching = batching(global_batch, micro_batch, world)
        if not 0 <= here < world:
            raise UsageError(f"rank={here}: must be from 0 to world_size - 1 ({world - 1})")
        self.size, self.seed, self.shuffle, self.rank = size, seed, shuffle, here
        self.consumed = consumed
        self._orders: dict[int, list[int]] = {}

    # -- where the run is ------------------------------------------------------
    @property
    def epoch(self) -> int:
        return self.consumed // self.size

    def advance(self, steps: int = 1) -> None:
        """``steps`` optimizer steps done (every rank calls it, with the same count)."""
        self.consumed += steps * self.batching.global_batch

    def state_dict(self) -> dict[str, Any]:
        return {"consumed": self.consumed, "seed": self.seed, "size": self.size,
                "shuffle": self.shuffle}  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Where a checkpoint left off; the order it was drawn with must be this one's."""
        for key in ("seed", "size", "shuffle"):
            if state.get(key) != getattr(self, key):
                raise UsageError(
                    f"the checkpoint's sampler has {key}={state.get(key)!r}, this one "
                    f"{getattr(self, key)!r}: the data order would change"
                )
        consumed = state.get("consumed")
        arguments.count("consumed", consumed)
        self.consumed = int(consumed)  # type: ignore[arg-type]

    def save(self, checkpoint: Path) -> None:
        """Keep this state in the (in-flight) checkpoint folder ``checkpoint``."""
        (Path(checkpoint) / SAMPLER_FILE).write_text(json.dumps(self.state_dict()))

    def resume(self, checkpoint: str | Path | None) -> bool:
        """Go on from the state kept in ``checkpoint`` (`slurmpre.resume_path()`'s answer;
        None, or a checkpoint without one: from where it is, and False). A kept state of
        another seed, size or shuffle is refused (`load_state_dict`)."""
        if checkpoint is None:
            return False
        path = Path(checkpoint) / SAMPLER_FILE
        try:
            state = json.loads(read_regular(path, SMALL))
        except FileNotFoundError:
            return False
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"cannot read the sampler's state {str(path)!r}: {exc}") from None
        if not isinstance(state, dict):
            raise CheckpointError(f"{str(path)!r} holds no sampler state")
        self.load_state_dict(state)
        return True

    # -- the order -------------------------------------------------------------
    def index(self, position: int) -> int:
        """The dataset index at this position of the stream."""
        epoch, offset = divmod(position, self.size)
        if not self.shuffle:
            return offset
        order = self._orders.get(epoch)
        if order is None:
            order = list(range(self.size))
            random.Random(f"{self.seed}:{epoch}").shuffle(order)
            self._orders = {epoch: order}  # one epoch's order at a time
        return order[offset]

    def step_indices(self, step_start: int) -> list[list[int]]:
        """This rank's micro batches of the optimizer step starting at stream position
        ``step_start``."""
        b = self.batching
        first = step_start + self.rank * b.per_rank
        mine = [self.index(p) for p in range(first, first + b.per_rank)]
        return [mine[i : i + b.micro_batch] for i in range(0, b.per_rank, b.micro_batch)]

    def __iter__(self) -> Iterator[list[int]]:
        end = (self.epoch + 1) * self.size
        position = self.consumed
        while position < end:
            yield from self.step_indices(position)
            position += self.batching.global_batch

    def __len__(self) -> int:
        """Micro batches left in this epoch, for this rank."""
        end = (self.epoch + 1) * self.size
        steps = -(-(end - self.consumed) // self.batching.global_batch)
        return steps * self.batching.accumulation
