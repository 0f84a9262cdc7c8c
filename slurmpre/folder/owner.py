"""One live job per checkpoint folder (docs/spec.md, the section of that name): the
ledger names the jobs of a folder, Slurm says which still live. Submitting one spec
twice is a common slip: both jobs would write into one folder.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurmpre.errors import JobNotFound, SlurmpreError
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import Start, Submitted, Successor
from slurmpre.slurm.client import SlurmClient

RECENT = 10  # how many of the folder's latest jobs are asked about


@dataclass(frozen=True)
class Holder:
    job: str
    state: str


def recorded_jobs(ledger: Ledger) -> list[str]:
    """The jobs the ledger names, newest last, each once: those submitted or started here,
    and the successors handed over to (one still pending is the folder's live job)."""
    seen: dict[str, None] = {}
    for record in ledger.records():
        named = [record.job] if isinstance(record, Submitted | Start) else []
        if isinstance(record, Successor):
            named.append(record.successor)
        for job in filter(None, named):
            seen.pop(job, None)
            seen[job] = None
    return list(seen)


def live_holders(
    ledger: Ledger,
    client: SlurmClient,
    *,
    besides: str | None = None,
) -> list[Holder]:
    """The other jobs recorded in this folder that Slurm says are still live; one Slurm
    does not answer about is not, and is logged (at INFO)."""
    live = []
    for job in [j for j in recorded_jobs(ledger) if j != besides][-RECENT:]:
        try:
            info = client.job(job)
        except JobNotFound:
            continue  # long gone
        except SlurmpreError as exc:
            import logging  # here: the job side starts without it (`slurmpre.cmd`)

            first = str(exc).splitlines()[0]
            logging.getLogger(__name__).info(f"cannot tell whether job {job} still runs ({first})")
            continue
        if not info.finished:
            live.append(Holder(job, info.state))
    return live


def describe(holders: list[Holder]) -> str:
    return ", ".join(f"job {h.job} ({h.state})" for h in holders)
