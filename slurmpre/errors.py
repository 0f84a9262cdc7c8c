"""The one error hierarchy of slurmpre: every error carries a message meant for the user,
which `slurmpre.cli.main` turns into one line and an exit code.
"""

from __future__ import annotations


class SlurmpreError(Exception):
    """Root of every error slurmpre raises on purpose. Exit code 1."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class UsageError(SlurmpreError):
    """Bad input: a value, an option, a spec key. Exit code 2."""

    exit_code = 2


class SpecError(UsageError):
    """A job spec is malformed; the message names the key and the value."""


class OtherShape(UsageError):
    """`sandbox up` of a sandbox that is up in another shape (`sandbox down` first)."""


class CommandError(SlurmpreError):
    """An external command could not run, timed out, or failed."""


class SlurmError(CommandError):
    """Slurm refused or failed a request."""


class JobNotFound(SlurmError):
    """Slurm knows no such job (never had it, or has forgotten it after MinJobAge)."""


class SandboxError(SlurmpreError):
    """The local Slurm sandbox could not be brought up, inspected or changed."""


class CheckpointError(SlurmpreError):
    """No usable checkpoint, or a checkpoint could not be written safely."""


class TransferError(CheckpointError):
    """A checkpoint could not be served or pulled over the network (`slurmpre.tier.transfer`)."""


class JobEnvironmentError(SlurmpreError):
    """The process is not inside the Slurm job it expects to be in."""


class RestartLimit(SlurmpreError):
    """The run stops restarting: too many restarts, or attempts that commit nothing
    (`slurmpre.job.start.limits`). Exit code 1; the job is not requeued again."""


class JobFailed(SlurmpreError):
    """A run waited for ended without completing: failed, cancelled, out of time, or
    given up (``state`` is Slurm's). Exit code 1."""

    def __init__(self, message: str, state: str) -> None:
        super().__init__(message)
        self.state = state


class HandedOver(JobEnvironmentError):
    """A job that handed over to a successor was started again (someone requeued it):
    the successor trains; this one does not, and ends without an error."""

    exit_code = 0
