"""Render a spec and hand it to Slurm through the client."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from slurmpre import cmd
from slurmpre.atomic import write_atomic
from slurmpre.errors import SlurmpreError, UsageError
from slurmpre.folder import access, records
from slurmpre.folder import script as script_file
from slurmpre.folder.access import Access, make_dirs
from slurmpre.folder.layout import FolderLayout, LogLayout
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.locks import FolderLock, LockTimeout
from slurmpre.folder.owner import describe, live_holders
from slurmpre.keys import as_written
from slurmpre.launchers import Launcher
from slurmpre.login import code, jobs, progress, resuming, variables
from slurmpre.login.render import command_line, render
from slurmpre.login.spec import JobSpec
from slurmpre.login.sweep import Task
from slurmpre.placement import deadline
from slurmpre.slurm.client import SlurmClient
from slurmpre.slurm.parse import expedited_requeue

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class Submitted:
    job_id: str
    script_copy: Path
    log: Path


def _make_dirs(spec: JobSpec, mode: Access) -> Ledger:
    """The checkpoint and log folders, made with the spec's access, and the ledger."""
    for key, path in (("checkpoint_dir", spec.checkpoint_dir), ("log_dir", spec.log_dir)):
        _creatable(key, Path(path))
        try:
            make_dirs(Path(path), mode)
        except OSError as exc:
            raise UsageError(
                f"{key} = {as_written(path)}: cannot create it ({exc.strerror})"
            ) from None
    ledger = Ledger(Path(spec.checkpoint_dir), access=mode)
    ledger.ensure()
    return ledger


# Run by the nodes' python: exit 10 when slurmpre does not import, 11 when the launcher's
# module (argv[1], "" for none) is not installed (found, not imported: torch takes
# seconds to import); then Accelerate reads the config named in argv[2] (as strictly as
# on every node: an unknown key is an error).
_CHECK = """\
import sys
try:
    import slurmpre
except BaseException as exc:
    print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
    sys.exit(10)
if sys.argv[1]:
    import importlib.util
    if importlib.util.find_spec(sys.argv[1]) is None:
        sys.exit(11)
if len(sys.argv) > 2:
    from accelerate.commands.config.config_args import load_config_from_file
    load_config_from_file(sys.argv[2])
"""
NO_SLURMPRE = 10
NO_LAUNCHER = 11


def check_python(
    python: str,
    cwd: Path | None = None,
    *,
    launcher: Launcher = Launcher.PLAIN,
    accelerate_config: str | None = None,
) -> None:
    """The nodes run the wrapper with ``python``: it must import slurmpre, or every node
    fails at once after the job has waited for its allocation; it must have what
    ``launcher`` runs (torch for torchrun, accelerate for accelerate launch); and
    Accelerate must read ``accelerate_config``. Checked here, in one run of ``python``,
    on the login node, which sees the same shared volume, from the folder the job will
    run in (sbatch's default: this one); up to a minute on a slow volume, shown as a wait."""
    needs = launcher.needs or ""
    argv = [python, "-c", _CHECK, needs, *([accelerate_config] if accelerate_config else [])]
    what = f"slurmpre and {needs}" if needs else "slurmpre"
    try:
        with progress.waiting(f"checking that {python} imports {what}"):
            proc = cmd.run(
                argv,
                timeout=120 if accelerate_config else 60,
                check=False,
                cwd=None if cwd is None else str(cwd),
                error=UsageError,
            )
    except UsageError as exc:
        raise UsageError(f"python = {as_written(python)} cannot run: {exc}") from None
    last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    if proc.returncode == NO_LAUNCHER:
        raise UsageError(
            f"python = {as_written(python)} has no {needs}, which launcher = "
            f"{as_written(launcher.value)} needs: pip install {needs} into that environment, "
            "or set python to the interpreter that has it"
        )
    if proc.returncode == NO_SLURMPRE or (proc.returncode and not accelerate_config):
        raise UsageError(
            f"python = {as_written(python)} cannot import slurmpre ({last}): install slurmpre "
            "into it, or set python to the interpreter that has it"
        )
    if proc.returncode:
        raise UsageError(
            f"accelerate_config = {as_written(accelerate_config)}: accelerate cannot read "
            f"it ({last})"
        )


def check_interpreter(spec: JobSpec) -> None:
    """What the nodes' python must do before a job waits for its nodes (whether a
    sandbox's nodes see it at all is the command line's check: `slurmpre.cli.common`)."""
    # The launcher runs under the command's interpreter (`python train.py`), or is the one
    # on PATH (`train.py`): the spec's python's own when the command names python bare or
    # a script, since the script puts that python's folder first on PATH, and no setup
    # line may put another environment before it (a `module load`, a venv's activate).
    first = spec.command[0]
    own = not spec.setup and (re.fullmatch(r"python[0-9.]*", first) or first.endswith(".py"))
    check_python(
        spec.python,
        launcher=spec.launcher if own else Launcher.PLAIN,
        accelerate_config=spec.accelerate_config or None,
    )


def submit(
    spec: JobSpec,
    client: SlurmClient,
    *,
    force: bool = False,
    resume: bool = False,
    fresh: bool = False,
    tasks: Sequence[Task] = (),
) -> Submitted:
    """Create the shared folders, submit, and keep a copy of the script next to the log.

    Refused while another live job uses the checkpoint folder (unless ``force``);
    the job is recorded in the folder's ledger, so the next submit can tell. What the
    job resumes from is logged (INFO, by this module); a folder whose last run finished
    its training is refused unless ``resume``; ``fresh`` moves the folder aside first
    (`slurmpre.login.resuming`). ``tasks``: a sweep's, one per array task
    (`slurmpre.login.sweep`).
    """
    check_interpreter(spec)
    if (line := _unknown_variables(spec, tasks)) is not None:
        LOG.info(line)
    with one_at_a_time(Path(spec.checkpoint_dir)):
        return _submit(spec, client, force, resume, fresh, tasks)


def _unknown_variables(spec: JobSpec, tasks: Sequence[Task]) -> str | None:
    """A warning for the variables the command (each task's) names that nothing is known
    to set on the nodes (`variables.unknown_in_command`)."""
    plain = spec.launcher == Launcher.PLAIN
    runs = [(t.command, {**spec.env, **t.env}) for t in tasks]
    unknown: list[str] = []
    for command, env in runs or [(spec.command, dict(spec.env))]:
        found = variables.unknown_in_command(command, env, os.environ, plain=plain)
        unknown += [name for name in found if name not in unknown]
    return variables.command_warning(unknown)


SUBMIT_WAIT = 120.0  # seconds a submission waits for another one into the same folder


@contextlib.contextmanager
def one_at_a_time(folder: Path) -> Iterator[None]:
    """Submissions into one checkpoint folder, one at a time: two `submit --fresh` at once
    would each see no live job, and move the folder from under the other's job. A lock
    of the user's own, named by the folder's real path."""
    key = hashlib.sha256(os.path.realpath(folder).encode()).hexdigest()[:20]
    where = jobs.index_path().parent / "submitting"
    try:
        make_dirs(where, access.OWNER)
        lock = FolderLock(where / f"{key}.lock", timeout=SUBMIT_WAIT).acquire(0)
    except LockTimeout:
        with progress.waiting(f"waiting for another submission into {folder}"):
            try:
                lock = FolderLock(where / f"{key}.lock", timeout=SUBMIT_WAIT).acquire()
            except LockTimeout:
                raise UsageError(
                    f"another submission into {str(folder)!r} has been under way for "
                    f"{SUBMIT_WAIT:g} s: try again once it is done"
                ) from None
    except (OSError, SlurmpreError) as exc:
        raise SlurmpreError(f"cannot take the submission lock in {where}: {exc}") from None
    try:
        yield
    finally:
        lock.release()


def _submit(
    spec: JobSpec,
    client: SlurmClient,
    force: bool,
    resume: bool,
    fresh: bool,
    tasks: Sequence[Task],
) -> Submitted:
    mode = access.NAMES[spec.file_access]
    folder = Path(spec.checkpoint_dir)
    plan = _refusals(spec, client, force=force, resume=resume, fresh=fresh)
    if plan.move_aside:
        aside = resuming.move_aside(folder)
        LOG.info(f"moved the earlier {folder.name} aside to {aside}; starts at step 0")
    for line in plan.lines:
        LOG.info(line)
    ledger = _make_dirs(spec, mode)
    here = Path.cwd()
    if spec.snapshot == "git":
        found = code.snapshot(here, folder, spec.snapshot_max_mb, mode, log_dir=Path(spec.log_dir))
        LOG.info(f"runs from {found.identity}, copied to {found.root}")
    else:
        found = code.identify(here)
    script = render(spec, found, tasks, expedite=spec.requeue and expedites(client))
    labels = tuple(t.label for t in tasks) or None
    # What a successor will submit again (restart = "successor"): recorded before the
    # job can start, so its first notice finds it.
    args = command_line(spec, script)
    script_file.record(FolderLayout(Path(spec.checkpoint_dir)), script, args)
    job_id = client.submit(script, args=args)
    ledger.append(
        records.Submitted(
            job=job_id, name=spec.name, code=found.identity, array=spec.array, tasks=labels
        )
    )
    copy = Path(spec.log_dir) / f"{spec.name}-{job_id}.sbatch"
    write_atomic(copy, script, mode=access.CONTROL_MODE)  # the spec's env is in it
    try:
        jobs.remember(
            jobs.Submitted(
                job_id, spec.name, spec.checkpoint_dir, spec.log_dir, time.time(), spec.array
            )
        )
    except SlurmpreError as exc:
        print(f"slurmpre: {exc} (status and logs will need --checkpoint-dir)", file=sys.stderr)
    tag = f"{job_id}_*" if spec.is_array else job_id
    return Submitted(job_id, copy, LogLayout(Path(spec.log_dir), spec.name).job_log(tag))


def expedites(client: SlurmClient) -> bool:
    """Whether the cluster allows an expedited requeue (25.11+, when its administrator
    enabled it): then the job's requeue asks for one. Not knowing is no."""
    try:
        return expedited_requeue(client.config())
    except SlurmpreError:
        return False


def _refusals(
    spec: JobSpec, client: SlurmClient, *, force: bool, resume: bool, fresh: bool
) -> resuming.Plan:
    """What the submission does with the folder's earlier work, once nothing refuses it:
    a live job in the folder, a finished run without --resume, --fresh on a folder that
    is not the job's own. Touches nothing."""
    folder = Path(spec.checkpoint_dir)
    try:
        is_dir = folder.is_dir()
    except OSError as exc:  # a folder on the way this user may not search
        raise UsageError(
            f"checkpoint_dir = {as_written(spec.checkpoint_dir)}: cannot reach it ({exc.strerror})"
        ) from None
    holders = live_holders(Ledger(folder), client) if is_dir else []
    if holders and (fresh or not force):
        also = " (--fresh never moves a folder a live job uses)" if fresh else ""
        raise UsageError(
            f"checkpoint folder {spec.checkpoint_dir!r} is in use by {describe(holders)}: "
            f"wait for it or cancel it (or pass --force to share the folder anyway){also}"
        )
    plan = resuming.check(folder, is_array=spec.is_array, resume=resume, fresh=fresh)
    if plan.move_aside:
        resuming.job_own(folder)
    if spec.deadline:
        _deadline_ahead(spec.deadline, None if plan.move_aside else folder)
    return plan


def _deadline_ahead(text: str, folder: Path | None) -> None:
    """Refuse a deadline already past: a moment, or a duration from the run's first
    submission into ``folder`` (None, or a folder with none: from now). A moment is
    named as written and as the login node reads it, beside now."""
    now = time.time()
    first = None
    if folder is not None and folder.is_dir():
        submits = [r.time for r in Ledger(folder).records() if isinstance(r, records.Submitted)]
        first = min((t for t in submits if t is not None), default=None)
    when = deadline.parse(text, first_submit=first if first is not None else now)
    if when > now:
        return
    if first is None or not deadline.is_duration(text):
        raise UsageError(
            f"deadline = {as_written(text)}: {deadline.stamp(when)} is in the past (it is now "
            f"{deadline.stamp(now)}): give a later one"
        )
    raise UsageError(
        f"deadline = {as_written(text)}: counted from the run's first submission into this "
        f"folder ({deadline.stamp(first)}), it ended at {deadline.stamp(when)} (it is now "
        f"{deadline.stamp(now)}): give a longer one, or --fresh to start the run over"
    )


def check(
    spec: JobSpec,
    client: SlurmClient,
    *,
    force: bool = False,
    resume: bool = False,
    fresh: bool = False,
    tasks: Sequence[Task] = (),
) -> None:
    """Everything `submit` would refuse, refused now, touching nothing (`test_only`, its
    lines at DEBUG only: `submit` says them once the job is queued). A sweep checks every
    job before it queues the first."""
    test_only(spec, client, force=force, resume=resume, fresh=fresh, tasks=tasks,
              level=logging.DEBUG)  # fmt: skip


def dry_run(
    spec: JobSpec,
    client: SlurmClient,
    *,
    force: bool = False,
    resume: bool = False,
    fresh: bool = False,
    tasks: Sequence[Task] = (),
    level: int = logging.INFO,
) -> str:
    """The script `submit` would queue, after every check `submit` makes (the nodes'
    python, a live job in the folder, a finished run, a deadline past, a snapshot's size);
    what the job would resume from is logged at ``level``, as `submit` logs it. It writes
    nothing (no lock, no folder) and never calls sbatch: ``sbatch --test-only`` is
    `test_only`'s."""
    check_interpreter(spec)
    if (line := _unknown_variables(spec, tasks)) is not None:
        LOG.log(level, line)
    plan = _refusals(spec, client, force=force, resume=resume, fresh=fresh)
    for key, path in (("checkpoint_dir", spec.checkpoint_dir), ("log_dir", spec.log_dir)):
        _creatable(key, Path(path))
    if spec.snapshot == "git":  # what it would copy, and no more than snapshot_max_mb
        folder, logs = Path(spec.checkpoint_dir), Path(spec.log_dir)
        code.to_copy(Path.cwd(), folder, spec.snapshot_max_mb, log_dir=logs)
    if plan.move_aside:
        folder = Path(spec.checkpoint_dir)
        LOG.log(level, f"would move the earlier {folder.name} aside; starts at step 0")
    for line in plan.lines:
        LOG.log(level, line)
    return render(spec, None, tasks)


def _creatable(key: str, path: Path) -> None:
    """What `_make_dirs` would refuse, judged without making anything: the nearest folder
    that exists on the way to ``path`` must be one this user may create folders in."""
    at = path
    while not at.is_dir() and at.parent != at:
        if at.exists() or at.is_symlink():  # a file (or a dangling link) on the way
            raise UsageError(
                f"{key} = {as_written(str(path))}: cannot create it ({at} is not a folder)"
            )
        at = at.parent
    if at != path and not os.access(at, os.W_OK | os.X_OK):
        raise UsageError(f"{key} = {as_written(str(path))}: cannot create it ({at} unwritable)")


def test_only(
    spec: JobSpec,
    client: SlurmClient,
    *,
    force: bool = False,
    resume: bool = False,
    fresh: bool = False,
    tasks: Sequence[Task] = (),
    level: int = logging.INFO,
) -> str:
    """Slurm's verdict on the script, without queuing it (``sbatch --test-only``, given
    the options `submit` gives it), after every check of `dry_run`."""
    script = dry_run(spec, client, force=force, resume=resume, fresh=fresh, tasks=tasks,
                     level=level)  # fmt: skip
    return client.submit(script, args=command_line(spec, script), test_only=True)
