"""How the ranks of one checkpoint meet: each says it wrote its part (or failed, so no rank
is left waiting), and all learn whether rank 0 committed it.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from slurmpre.errors import CheckpointError
from slurmpre.folder import trust
from slurmpre.folder.access import CONTROL_MODE, Access
from slurmpre.reading import SMALL


def device(dist: Any) -> Any:
    torch = sys.modules["torch"]
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


class Meeting(Protocol):
    """How the ranks of one checkpoint learn that all wrote, and what rank 0 made of it."""

    def failed(self, exc: BaseException) -> None: ...

    def written(self) -> None: ...

    def verdict(self, final: Path | None, exc: BaseException | None) -> None: ...


class Alone:
    def failed(self, exc: BaseException) -> None:
        pass

    def written(self) -> None:
        pass

    def verdict(self, final: Path | None, exc: BaseException | None) -> None:
        pass


class TorchMeeting:
    """Two small all_reduces: did every rank write, did rank 0 commit."""

    def __init__(self, dist: Any) -> None:
        self.dist = dist

    def all_agree(self, ok: bool) -> bool:
        """Whether every rank says ``ok`` (each learns the same answer)."""
        torch = sys.modules["torch"]
        flag = torch.tensor([1 if ok else 0], dtype=torch.int64, device=device(self.dist))
        self.dist.all_reduce(flag, op=self.dist.ReduceOp.MIN)
        return bool(flag.item())

    def failed(self, exc: BaseException) -> None:
        self.all_agree(False)

    def written(self) -> None:
        if not self.all_agree(True):
            raise CheckpointError("another rank failed while writing the checkpoint: not committed")

    def verdict(self, final: Path | None, exc: BaseException | None) -> None:
        if not self.all_agree(exc is None) and exc is None:
            raise CheckpointError("rank 0 could not commit the checkpoint")


class FolderMeeting:
    """Marks in a folder beside the checkpoint, for ranks without torch.distributed:
    ``done-<rank>`` or ``abort-<rank>`` from every rank, then rank 0's ``verdict``. The
    folder and its marks are the user's own whatever the access (a mark decides whether
    a checkpoint is committed): anyone else's is not read (`slurmpre.folder.trust`)."""

    POLL = 0.05

    def __init__(self, folder: Path, rank: int, world: int, timeout: float, access: Access) -> None:
        self.folder, self.rank, self.world, self.timeout = folder, rank, world, timeout
        self.access = access
        try:
            trust.make_own_dir(folder, 0o700)
        except OSError as exc:
            raise CheckpointError(f"cannot create {str(folder)!r}: {exc.strerror}") from None

    def _mark(self, name: str, text: str = "") -> None:
        with contextlib.suppress(OSError, trust.Untrusted):
            trust.write(self.folder / name, text, mode=CONTROL_MODE)

    def _wait(self, what: str, ready: Callable[[], str | None]) -> str:
        deadline = time.monotonic() + self.timeout
        while (found := ready()) is None:
            if time.monotonic() >= deadline:
                raise CheckpointError(
                    f"rank {self.rank}: gave up waiting {self.timeout:g} s for {what} "
                    f"({self.folder}); the checkpoint is not committed"
                )
            time.sleep(self.POLL)
        return found

    def failed(self, exc: BaseException) -> None:
        self._mark(f"abort-{self.rank}", f"{type(exc).__name__}: {exc}")
        if self.rank == 0:
            self._mark("verdict", "aborted")

    def _all_written(self) -> str | None:
        try:
            names = trust.own_names(self.folder)
        except (OSError, trust.Untrusted):
            return None
        aborted = sorted(n for n in names if n.startswith("abort-"))
        if aborted:
            return aborted[0]
        done = all(f"done-{r}" in names for r in range(self.world))
        return "done" if done else None

    def written(self) -> None:
        self._mark(f"done-{self.rank}")
        if self.rank != 0:
            return
        try:
            outcome = self._wait(f"all {self.world} ranks to finish writing", self._all_written)
        except CheckpointError:
            self._mark("verdict", "aborted")
            raise
        if outcome != "done":
            self._mark("verdict", "aborted")
            raise CheckpointError(
                f"rank {outcome.removeprefix('abort-')} failed while writing the checkpoint: "
                "not committed"
            )

    def _read_verdict(self) -> str | None:
        try:
            return trust.read_text(self.folder / "verdict", SMALL) or None
        except (OSError, UnicodeDecodeError, trust.Untrusted):
            return None

    def verdict(self, final: Path | None, exc: BaseException | None) -> None:
        if self.rank == 0:
            self._mark("verdict", "aborted" if exc is not None else f"committed {final}")
            return
        outcome = self._wait("rank 0 to commit the checkpoint", self._read_verdict)
        if not outcome.startswith("committed"):
            raise CheckpointError("another rank failed while writing the checkpoint: not committed")
