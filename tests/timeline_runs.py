"""Ledgers for the timeline page's tests (`slurmpre status NAME --html FILE`): a run
preempted once, written with the real records into a real ledger."""

from __future__ import annotations

from pathlib import Path

from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import (
    Checkpoint,
    End,
    Notice,
    Record,
    Start,
    Submitted,
    Successor,
    Waiting,
)

T0 = 1_796_000_000.0


def preempted_once(
    folder: Path, *, name: str = "train", nodes: tuple[str, str, str] = ("pre-a", "pre-b", "pre-c")
) -> Ledger:
    """Job 100 trains on the first two nodes; the second drains; job 101 is submitted,
    starts up beside it (make before break), and takes over on the first and third after
    100's checkpoint on the notice; it trains to the end."""
    a, b, c = nodes
    ledger = Ledger(folder)
    run: list[Record] = [
        Submitted(job="100", name=name, time=T0),
        Start(job="100", attempt=0, nodes=(a, b), num_nodes=2, world_size=2, time=T0 + 10),
        Checkpoint(
            job="100",
            attempt=0,
            step=50,
            path=str(folder / "step-50"),
            after_notice=False,
            seconds=2.0,
            time=T0 + 100,
        ),
        Notice(
            job="100",
            attempt=0,
            kind="drain",
            node=b,
            reason="preempted",
            seen_at=T0 + 201,
            first=True,
            drained_at=T0 + 200,
            step_at_notice=50,
            time=T0 + 201,
        ),
        Successor(
            job="100",
            attempt=0,
            successor="101",
            excluded=(b,),
            why="drain of " + b,
            submitted_at=T0 + 202,
            time=T0 + 202,
        ),
        Waiting(job="101", attempt=0, predecessor="100", waiting_at=T0 + 215, time=T0 + 215),
        Checkpoint(
            job="100",
            attempt=0,
            step=80,
            path=str(folder / "step-80"),
            after_notice=True,
            seconds=3.0,
            time=T0 + 220,
        ),
        End(job="100", attempt=0, exit_code=0, seconds=212.0, time=T0 + 222),
        Start(
            job="101",
            attempt=0,
            nodes=(a, c),
            num_nodes=2,
            world_size=2,
            step=80,
            resume_from=str(folder / "step-80"),
            time=T0 + 225,
        ),
        Checkpoint(
            job="101",
            attempt=0,
            step=150,
            path=str(folder / "step-150"),
            after_notice=False,
            seconds=2.5,
            time=T0 + 400,
        ),
        End(job="101", attempt=0, exit_code=0, seconds=185.0, time=T0 + 410),
    ]
    for record in run:
        ledger.append(record)
    return ledger
