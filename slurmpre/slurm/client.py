"""The Slurm client: one Protocol, backends chosen in one place.

The command-line backend (``sbatch``, ``scontrol``, ``sinfo``) is the one backend: it
works against every release (README, "Why no pyslurm").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from slurmpre.cmd import Result, run
from slurmpre.errors import JobNotFound, SlurmError
from slurmpre.slurm.parse import (
    SQUEUE_FORMAT,
    JobInfo,
    NodeInfo,
    parse_config,
    parse_jobs,
    parse_nodes,
    parse_resize_env,
    parse_squeue,
    parse_submit,
    parse_version,
)


class SlurmClient(Protocol):
    """What slurmpre asks of Slurm."""

    # Times slurmctld's rate limit told a query to back off (0 where a backend cannot tell).
    throttled: int

    def version(self) -> tuple[int, int, int]: ...

    def nodes(self, names: Sequence[str] = ()) -> list[NodeInfo]: ...

    def job(self, job_id: str) -> JobInfo: ...

    def jobs(self, user: str | None = None) -> list[JobInfo]:
        """Every job slurmctld knows (one query, whoever's); with ``user``, only that
        user's (id, array task, state, restarts and name)."""
        ...

    def submit(self, script: str, *, args: Sequence[str] = (), test_only: bool = False) -> str:
        """Submit a batch script; return the job id (with ``test_only``, Slurm's verdict)."""
        ...

    def update_node(self, name: str, *, state: str, reason: str | None = None) -> None: ...

    def requeue(self, job_id: str) -> None: ...

    def set_requeue(self, job_id: str, requeue: bool) -> None: ...

    def cancel(self, job_id: str) -> None: ...

    def config(self) -> dict[str, str]: ...

    def resize(self, job_id: str, nodes: Sequence[str]) -> dict[str, str | None]:
        """Keep only ``nodes`` in the running job ``job_id``, releasing the others at once;
        the job's environment as Slurm resized it (None: the variable is gone)."""
        ...


# What Slurm's library says (at -v) each time slurmctld's rate limit makes it wait.
RATE_LIMITED = "RPC rate limited"


class CommandLineSlurm:
    """The backend that always works: Slurm's own command-line tools."""

    def __init__(self, timeout: float = 30.0, env: Mapping[str, str] | None = None) -> None:
        self.timeout = timeout
        self.env = env  # None: this process's (Slurm's commands found on its PATH)
        # Slurm's library sleeps and asks again by itself (rl_enable, 23.02+), and says so at -v.
        self.throttled = 0

    def _call(self, argv: Sequence[str], *, input: str | None = None) -> Result:
        return run(argv, timeout=self.timeout, env=self.env, input=input, error=SlurmError)

    def _run(self, argv: Sequence[str], *, input: str | None = None) -> str:
        return self._call(argv, input=input).stdout

    def version(self) -> tuple[int, int, int]:
        return parse_version(self._run(["sinfo", "--version"]))

    def nodes(self, names: Sequence[str] = ()) -> list[NodeInfo]:
        # --local: a node is always of this cluster; it spares slurmctld a federation
        # lookup on every call (two RPCs a query instead of three, counted with sdiag).
        argv = ["scontrol", "-v", "--local", "show", "node", "-o"]
        if names:
            argv.append(",".join(names))
        proc = self._call(argv)
        self.throttled += proc.stderr.count(RATE_LIMITED)
        return parse_nodes(proc.stdout)

    def job(self, job_id: str) -> JobInfo:
        """The job; JobNotFound when Slurm knows no such job (the one place that reads
        scontrol's words for it)."""
        try:
            jobs = parse_jobs(self._run(["scontrol", "show", "job", "-o", str(job_id)]))
        except SlurmError as exc:
            if "Invalid job id" in str(exc):
                raise JobNotFound(f"Slurm knows no job {job_id}") from None
            raise
        if not jobs:
            raise JobNotFound(f"Slurm knows no job {job_id}")
        return jobs[0]

    def jobs(self, user: str | None = None) -> list[JobInfo]:
        if user is None:
            return parse_jobs(self._run(["scontrol", "show", "job", "-o"]))
        # Only the user's own, as `squeue --me` lists them: slurmctld filters them, and
        # nobody else's jobs cross the wire.
        argv = ["squeue", "--noheader", f"--user={user}", "--states=all"]
        return parse_squeue(self._run([*argv, f"--Format={SQUEUE_FORMAT}"]))

    def submit(self, script: str, *, args: Sequence[str] = (), test_only: bool = False) -> str:
        if test_only:
            # sbatch --test-only reports its verdict on stderr and queues nothing.
            res = self._call(["sbatch", "--test-only", *args], input=script)
            return (res.stderr or res.stdout).strip()
        return parse_submit(self._run(["sbatch", "--parsable", *args], input=script))

    def update_node(self, name: str, *, state: str, reason: str | None = None) -> None:
        argv = ["scontrol", "update", f"nodename={name}", f"state={state}"]
        if reason is not None:
            argv.append(f"reason={reason}")
        self._run(argv)

    def requeue(self, job_id: str) -> None:
        self._run(["scontrol", "requeue", str(job_id)])

    def set_requeue(self, job_id: str, requeue: bool) -> None:
        self._run(["scontrol", "update", f"JobId={job_id}", f"Requeue={int(requeue)}"])

    def cancel(self, job_id: str) -> None:
        self._run(["scancel", str(job_id)])

    def config(self) -> dict[str, str]:
        return parse_config(self._run(["scontrol", "show", "config"]))

    def resize(self, job_id: str, nodes: Sequence[str]) -> dict[str, str | None]:
        # scontrol writes slurm_job_<id>_resize.{sh,csh} into its working directory:
        # a private one, so nothing lands in the user's folder and nobody else's is read.
        import tempfile

        with tempfile.TemporaryDirectory(prefix="slurmpre-resize-") as work:
            run(
                ["scontrol", "update", f"JobId={job_id}", f"NodeList={','.join(nodes)}"],
                timeout=self.timeout,
                error=SlurmError,
                cwd=work,
            )
            script = Path(work) / f"slurm_job_{job_id}_resize.sh"
            try:
                text = script.read_text()
            except OSError as exc:
                raise SlurmError(f"scontrol wrote no {script.name}: {exc.strerror}") from None
        return parse_resize_env(text)


def default_client() -> SlurmClient:
    """The one place a backend is chosen: the command-line tools for now."""
    return CommandLineSlurm()
