"""What `sandbox up` is asked for, and whether the sandbox that is up is that: an `up`
of another shape is refused in one line (`down` first), the same one is harmless."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurmpre.errors import OtherShape
from slurmpre.sandbox.config import STOCK, TUNED, NodeSpec, State, Timings
from slurmpre.slurm.parse import format_version


@dataclass(frozen=True)
class SharedDir:
    """`up --shared-dir DIR --shared-mbps N`: DIR as the host and the nodes reach it, and
    its cap in MB/s (10**6 bytes a second; None: no cap). `shared_fs` mounts it."""

    dir: Path
    mbps: float | None

    @property
    def backing(self) -> Path:
        """Where its files lie: beside DIR, hidden; they outlive `down`."""
        return self.dir.parent / f".{self.dir.name}.slowfs"

    def record(self, pid: int | None = None) -> dict[str, Any]:
        """What the state keeps (`config.State.shared`); ``pid``: its server's."""
        return {"dir": str(self.dir), "mbps": self.mbps, "backing": str(self.backing), "pid": pid}


@dataclass(frozen=True)
class Asked:
    specs: tuple[NodeSpec, ...]
    stock_timings: bool = False
    tracking: str = "auto"  # auto, cgroup or pgid
    suite: str | None = None  # a Debian root's suite; None: the host's Slurm
    slurm_given: bool = False  # --slurm was given (else the release that is up is kept)
    rate_limit: str | None = None
    expedite: bool = False
    shared: SharedDir | None = None

    @property
    def timings(self) -> Timings:
        return STOCK if self.stock_timings else TUNED

    def is_up_as(self, state: State) -> bool:
        """The sandbox up as ``state`` is the one asked for. No shared dir asked keeps the
        one that is up (as no --slurm keeps the release): a drill's big-state scene brings
        the sandbox up with one, and the tests and benchmarks after it run on as they were."""
        now = None if state.shared is None else (state.shared.get("dir"), state.shared.get("mbps"))
        want = now if self.shared is None else (str(self.shared.dir), self.shared.mbps)
        return (
            [(s.name, s.preemptible) for s in self.specs]
            == [(n["name"], n["preemptible"]) for n in state.nodes]
            and state.timings == self.timings.name
            and state.rate_limit == self.rate_limit
            and state.expedite == self.expedite
            and self.tracking in ("auto", state.tracking)
            and not (self.slurm_given and self.suite != state.suite)
            and now == want
        )


def shared_words(shared: dict[str, Any] | None) -> str:
    """A shared filesystem's record in words: ``shared /srv/ckpt at 16 MB/s``."""
    if not shared:
        return "no shared dir"
    mbps = shared.get("mbps")
    return f"shared {shared['dir']} at " + (f"{mbps:g} MB/s" if mbps else "no cap")


def refuse_another_shape(state: State, asked: Asked) -> None:
    """`up` of a sandbox that is up as ``state``: a UsageError unless it is the one asked."""
    if asked.is_up_as(state):
        return
    preemptible = sum(bool(n["preemptible"]) for n in state.nodes)
    extra = f", {shared_words(state.shared)}" if state.shared or asked.shared else ""
    raise OtherShape(
        f"the sandbox is up with {len(state.nodes)} nodes "
        f"({preemptible} preemptible, {state.timings} timings, "
        f"proctrack/{state.tracking}, Slurm {format_version(state.version)}{extra}); "
        "run `slurmpre sandbox down` first to change its shape"
    )
