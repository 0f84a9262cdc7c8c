"""Slurm clients for unit tests: each implements the whole `SlurmClient` protocol, and a
call a test did not script fails that test, naming the call (never a silent default).

A fake never replaces the real Slurm in an integration test: those run against the
sandbox. Answers are built from output captured on the real cluster (tests/data)
where the shape matters.
"""

from __future__ import annotations

from collections.abc import Sequence

from slurmpre.errors import JobNotFound, SlurmError
from slurmpre.slurm.parse import JobInfo, NodeInfo

UNREACHABLE = "command failed (exit 1): scontrol show job\n    Unable to contact slurm controller"


class FakeSlurm:
    """The base: every call fails the test unless a subclass scripts it."""

    throttled = 0

    def _unexpected(self, call: str) -> AssertionError:
        return AssertionError(f"{type(self).__name__}: this test did not expect `{call}`")

    def version(self) -> tuple[int, int, int]:
        raise self._unexpected("version")

    def nodes(self, names: Sequence[str] = ()) -> list[NodeInfo]:
        raise self._unexpected(f"nodes {list(names)}")

    def job(self, job_id: str) -> JobInfo:
        raise self._unexpected(f"job {job_id}")

    def jobs(self, user: str | None = None) -> list[JobInfo]:
        raise self._unexpected(f"jobs user={user}")

    def submit(self, script: str, *, args: Sequence[str] = (), test_only: bool = False) -> str:
        raise self._unexpected(f"submit {list(args)}")

    def update_node(self, name: str, *, state: str, reason: str | None = None) -> None:
        raise self._unexpected(f"update_node {name} {state}")

    def requeue(self, job_id: str) -> None:
        raise self._unexpected(f"requeue {job_id}")

    def set_requeue(self, job_id: str, requeue: bool) -> None:
        raise self._unexpected(f"set_requeue {job_id} {requeue}")

    def cancel(self, job_id: str) -> None:
        raise self._unexpected(f"cancel {job_id}")

    def config(self) -> dict[str, str]:
        raise self._unexpected("config")

    def resize(self, job_id: str, nodes: Sequence[str]) -> dict[str, str | None]:
        raise self._unexpected(f"resize {job_id} {list(nodes)}")


class Jobs(FakeSlurm):
    """A Slurm that knows these jobs (by id), forgets the rest, or does not answer at all
    (``down``), or not about the jobs named in ``unanswered``."""

    def __init__(
        self, known: dict[str, JobInfo], down: bool = False, unanswered: Sequence[str] = ()
    ) -> None:
        self.known, self.down, self.unanswered = known, down, set(unanswered)
        self.asked: list[str] = []

    def job(self, job_id: str) -> JobInfo:
        self.asked.append(job_id)
        if self.down or job_id in self.unanswered:
            raise SlurmError(UNREACHABLE)
        if job_id not in self.known:
            raise JobNotFound(f"Slurm knows no job {job_id}")  # as the client says it
        return self.known[job_id]

    def jobs(self, user: str | None = None) -> list[JobInfo]:
        self.asked.append(f"jobs user={user}")
        if self.down:
            raise SlurmError(UNREACHABLE)
        return [j for j in self.known.values() if user is None or j.user == user]


class Nodes(FakeSlurm):
    """A Slurm whose `nodes` answer is fixed (output captured from the real cluster)."""

    def __init__(self, nodes: list[NodeInfo]) -> None:
        self.answer = nodes

    def nodes(self, names: Sequence[str] = ()) -> list[NodeInfo]:
        return self.answer
