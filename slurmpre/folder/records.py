"""The ledger's records: one frozen type per event, the only thing the job side tells the
login side (``<checkpoint_dir>/.slurmpre/attempts.jsonl``). What a record is, and how it
reads and writes its JSON, is `slurmpre.folder.record`; each type here registers itself
there by its event name, its class name in snake_case (`EVENTS`).

The job side imports this module: it imports nothing but the standard library.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

from slurmpre.folder.record import (
    EVENTS,
    AttemptId,
    AttemptRecord,
    Other,
    Record,
    describe_notice,
    record_type,
)

__all__ = ["EVENTS", "AttemptId", "AttemptRecord", "Other", "Record", "describe_notice"]


@record_type
class Submitted(Record):
    """`slurmpre submit` queued the job (written on the login node)."""

    name: str
    code: str | None = None  # the code's identity at submit (`slurmpre.login.code`)
    array: str | None = None  # an array job's range of tasks ("0-2")
    # A sweep's tasks, as its overrides name each one ("env.LR=0.1 env.SEED=1"), in order.
    tasks: tuple[str, ...] | None = None

    _OPTIONAL: ClassVar[frozenset[str]] = frozenset({"time", "code", "array", "tasks"})


@record_type
class Start(AttemptRecord):
    """Node 0 chose the checkpoint to resume from; the attempt starts on these nodes."""

    nodes: tuple[str, ...]
    num_nodes: int | None = None
    world_size: int | None = None
    resume_from: str | None = None
    step: int | None = None
    code: str | None = None  # the code it runs, as the script says (SLURMPRE_CODE)
    spares: tuple[str, ...] | None = None  # nodes held beside ``nodes`` that do not train

    _OPTIONAL: ClassVar[frozenset[str]] = frozenset({"time", "code", "spares"})


@record_type
class Notice(AttemptRecord):
    """The watcher saw a drain, the time-limit warning, or chose to move (placement, grow).
    The first notice of an attempt also says what the watcher will do and by when."""

    kind: str  # "drain", "time-limit", "placement" or "grow"
    node: str | None
    reason: str | None
    seen_at: float
    first: bool
    step_at_notice: int | None = None
    drained_at: float | None = None
    deadline_from: str | None = None
    deadline_at: float | None = None
    restart: str | None = None  # "in_place" or "requeue"
    restart_why: str | None = None
    requeue_floor_s: float | None = None
    expected_wait_s: dict[str, Any] | None = None
    nodes: int | None = None  # a grow: the nodes it trained on ...
    grow_to: int | None = None  # ... and its successor's

    _FIRST_ONLY: ClassVar[frozenset[str]] = frozenset(
        {
            "step_at_notice",
            "drained_at",
            "deadline_from",
            "deadline_at",
            "restart",
            "restart_why",
            "requeue_floor_s",
            "expected_wait_s",
        }
    )
    _OPTIONAL: ClassVar[frozenset[str]] = frozenset({"time", "nodes", "grow_to"})  # a grow's

    def _omitted(self) -> frozenset[str]:
        # The first notice writes its plan whole, nulls included; a repeated one has none.
        if self.first and self.read_keys is None:
            return self._OPTIONAL
        return self._OPTIONAL | self._FIRST_ONLY

    def describe(self) -> str:
        return describe_notice(self.kind, self.node, self.reason)


@record_type
class Checkpoint(AttemptRecord):
    """``slurmpre.checkpoint()`` committed a checkpoint (rank 0)."""

    step: int
    path: str
    after_notice: bool
    seconds: float | None = None  # writing and committing it; unknown for another's save
    stopping: bool | None = None
    flush_seconds: float | None = None  # with local_dir: ``seconds`` is the save on the node

    _OPTIONAL: ClassVar[frozenset[str]] = frozenset(
        {"time", "seconds", "stopping", "flush_seconds"}
    )


@record_type
class Saved(AttemptRecord):
    """A checkpoint sealed in the nodes' local folders; the flush commits it later."""

    step: int
    path: str
    seconds: float
    after_notice: bool


@record_type
class Serving(AttemptRecord):
    """Where a node serves its local checkpoints to the job that takes over."""

    node: str
    host: str
    port: int


@record_type
class PullAsked(AttemptRecord):
    """Node 0 asks its nodes (``pullers``, node ids; None: every node) to pull ``step``
    from ``sources`` (host:port of each); in place, ``predecessor`` is the job itself."""

    predecessor: str
    step: int
    sources: tuple[str, ...]
    pullers: tuple[int, ...] | None = None

    _OPTIONAL: ClassVar[frozenset[str]] = frozenset({"time", "pullers"})


@record_type
class Pulled(AttemptRecord):
    """One node of a successor pulled ``step`` (``ok``), or why not."""

    node: int
    step: int
    ok: bool
    seconds: float
    bytes: int
    why: str | None = None

    _OPTIONAL: ClassVar[frozenset[str]] = frozenset({"time", "why"})


@record_type
class Replicated(AttemptRecord):
    """Node ``node`` keeps node ``of``'s part of ``step`` beside its own."""

    node: int
    of: int
    step: int
    bytes: int
    seconds: float


@record_type
class Adopted(AttemptRecord):
    """A node of a restarted attempt took over what an earlier attempt left of ``step``
    in its node-local folder (`slurmpre.tier.salvage`)."""

    node: int
    step: int
    source: str
    parts: tuple[int, ...] | None = None  # None: a whole copy
    nodes: int | None = None
    save: str | None = None  # parts of two saves of one step are never mixed

    _OPTIONAL: ClassVar[frozenset[str]] = frozenset({"time", "parts", "nodes", "save"})


@record_type
class PullDone(AttemptRecord):
    """Every node holds ``step`` (``ok``: ``predecessor`` may stop serving), or why not."""

    predecessor: str
    step: int
    ok: bool
    why: str | None = None

    _OPTIONAL: ClassVar[frozenset[str]] = frozenset({"time", "why"})


@record_type
class Committed(AttemptRecord):
    """The watcher saw the checkpoint that answers the notice."""

    step: int | None
    path: str
    committed_seen_at: float


@record_type
class Requeued(AttemptRecord):
    why: str | None
    requeued_at: float
    # --requeue=expedite on a cluster that allows it (no floor): True; else left out.
    expedited: bool | None = None

    _OPTIONAL: ClassVar[frozenset[str]] = frozenset({"time", "expedited"})


@record_type
class RequeueSkipped(AttemptRecord):
    why: str | None


@record_type
class InPlaceRequested(AttemptRecord):
    """The watcher asked the batch script's supervisor to go on without ``release``."""

    keep: tuple[str, ...]
    release: tuple[str, ...]
    why: str | None
    requested_at: float
    spares_in: tuple[str, ...] | None = None
    early: bool | None = None  # `handover.overlap`

    _OPTIONAL: ClassVar[frozenset[str]] = frozenset({"time", "spares_in", "early"})


@record_type
class InPlace(AttemptRecord):
    """The supervisor released the nodes; the next step runs on ``kept``."""

    kept: tuple[str, ...]
    released: tuple[str, ...]
    release_s: float
    requested_at: float
    released_at: float
    why: str | None
    spares_in: tuple[str, ...] | None = None

    _OPTIONAL: ClassVar[frozenset[str]] = frozenset({"time", "spares_in"})


@record_type
class SpareReleased(AttemptRecord):
    """A spare drained: the supervisor released it while the training went on."""

    released: tuple[str, ...]
    release_s: float
    released_at: float
    error: str | None = None


@record_type
class Successor(AttemptRecord):
    """The watcher submitted a new job to take over, after making this one not requeueable."""

    successor: str
    excluded: tuple[str, ...]
    why: str | None
    submitted_at: float


@record_type
class Waiting(AttemptRecord):
    """A successor's training waits in `slurmpre.resume_path()` for ``predecessor``."""

    predecessor: str
    waiting_at: float


@record_type
class Stopping(AttemptRecord):
    """The watcher told a script that trained on after its notice checkpoint to stop."""

    why: str
    asked_at: float


@record_type
class InPlaceFailed(AttemptRecord):
    why: str | None


@record_type
class GaveUp(AttemptRecord):
    """The run stops restarting (`slurmpre.job.start.limits`): this attempt did not train."""

    why: str


@record_type
class Placed(AttemptRecord):
    """Where the run's next job trains, and the facts it was decided on (`placement`)."""

    where: str
    why: str
    decided_at: float
    steps_done: int | None = None
    total_steps: int | None = None
    deadline_at: float | None = None
    slack_s: float | None = None
    line_step: float | None = None
    rate: float | None = None  # steps per second
    preemptions: int = 0
    # Waiting on preemptible nodes may not wait for ever: a twin on standard nodes,
    # queued to start no earlier than ``twin_from``; whichever starts first takes over.
    twin: str | None = None
    twin_from: float | None = None


@record_type
class Claimed(AttemptRecord):
    """Of a successor and its twin, the first to claim ``predecessor`` trains."""

    predecessor: str


@record_type
class End(AttemptRecord):
    """The training of the attempt (or step) exited."""

    exit_code: int | None
    seconds: float


def notice_step(recs: Iterable[Record]) -> int | None:
    """The newest step saved on a notice among ``recs``: committed in the folder
    (`Checkpoint`), or, with `local_dir`, sealed on the nodes (`Saved`), whose commit comes
    only with the flush, long after the hand-over. None: no notice save."""
    steps = [r.step for r in recs if isinstance(r, (Checkpoint, Saved)) and r.after_notice]
    return max(steps) if steps else None
