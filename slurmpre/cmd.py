"""The one seam through which slurmpre runs the external commands whose answer it reads
(Slurm's tools, apt-get, munge's checks); the processes it supervises are started by
their supervisors (job/start/supervise.py, job/handover/steps.py, sandbox/daemons.py).

argv lists only, never a shell; a timeout on every call; logged at debug; a missing
executable, a time-out and a failure each become a `CommandError` whose message names
the command, the exit code and the indented stderr.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from slurmpre.errors import CommandError, SlurmpreError
from slurmpre.signals import warning_blocked


def _debug(message: str, *args: object) -> None:
    """Log at debug level, when something set logging up (``--debug``); a process that
    never imported logging does not import it here, to say nothing."""
    logging = sys.modules.get("logging")
    if logging is None:
        return
    try:  # another thread may be importing it this instant: partly there, so no debug line
        logging.getLogger(__name__).debug(message, *args)
    except (AttributeError, NameError):
        return


DEFAULT_TIMEOUT = 60.0


@dataclass(frozen=True)
class Result:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


def render_failure(argv: Sequence[str], returncode: int, stdout: str, stderr: str) -> str:
    """The message of a failed command: the command, its exit code and its output, indented."""
    out = stderr.strip() or stdout.strip()
    lines = [f"command failed (exit {returncode}): {shlex.join(argv)}"]
    return "\n".join(lines + ["    " + line for line in out.splitlines()])


def run(
    argv: Sequence[str],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    cwd: str | None = None,
    error: type[SlurmpreError] = CommandError,
) -> Result:
    """Run ``argv`` and return its output; raise ``error`` when it cannot run or fails."""
    argv = tuple(argv)
    _debug("run: %s", shlex.join(argv))
    try:
        # The warning Slurm sends to the whole job step must not kill an `scontrol` the
        # wrapper runs at that instant: every command starts with it blocked.
        with warning_blocked():
            proc = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                text=True,
                env=dict(env) if env is not None else None,
                cwd=cwd,
            )
        with proc:  # pipes closed and the child reaped whatever happens
            try:
                stdout, stderr = proc.communicate(input, timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                raise
    except FileNotFoundError:
        raise error(f"{argv[0]}: command not found (is it installed and on PATH?)") from None
    except PermissionError:
        raise error(f"{argv[0]}: permission denied") from None
    except subprocess.TimeoutExpired:
        raise error(f"command timed out after {timeout:g} s: {shlex.join(argv)}") from None
    result = Result(argv, proc.returncode, stdout, stderr)
    _debug("exit %d: %s", proc.returncode, argv[0])
    if check and proc.returncode != 0:
        raise error(render_failure(argv, proc.returncode, stdout, stderr))
    return result
