"""Job spec -> sbatch script: a Jinja environment over templates/, and a pure render().
Every value that lands in shell goes through a quoting filter, which sbatch's own
#SBATCH parser honours too, so quoted directives survive hostile names.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jinja2

from slurmpre import environment, keys, reading
from slurmpre._version import __version__
from slurmpre.errors import UsageError
from slurmpre.folder import access
from slurmpre.folder.layout import LogLayout
from slurmpre.keys import as_written
from slurmpre.login import sbatch_options, variables
from slurmpre.login.code import Code
from slurmpre.login.spec import JobSpec
from slurmpre.login.sweep import Task
from slurmpre.noderange import NodeRange
from slurmpre.placement import deadline
from slurmpre.signals import WARN_SIGNAL

DEFAULT_TEMPLATE = "default.sbatch.j2"


def templates_dir() -> Path:
    """Inside an installed wheel: slurmpre/templates; in a checkout: the repository's templates/."""
    packaged = Path(__file__).parent.parent / "templates"
    if packaged.is_dir():
        return packaged
    return Path(__file__).parent.parent.parent / "templates"


def _quote(value: object) -> str:
    return shlex.quote(str(value))


class _Loader(jinja2.BaseLoader):
    """Templates from folders, as FileSystemLoader finds them, read as regular files of
    bounded size (a FIFO or a device by a template's name must not hang a render)."""

    def __init__(self, dirs: list[str]) -> None:
        self.dirs = dirs

    def get_source(
        self, env: jinja2.Environment, template: str
    ) -> tuple[str, str, Callable[[], bool]]:
        parts = jinja2.loaders.split_template_path(template)
        for folder in self.dirs:
            path = Path(folder, *parts)
            if not path.exists():
                continue
            try:
                source = reading.read_text(path, reading.MEDIUM)
                mtime = path.stat().st_mtime
            except UnicodeDecodeError:
                raise UsageError(f"template {template}: not UTF-8 text ({path})") from None
            except OSError as exc:
                raise UsageError(f"template {template}: {exc.strerror or exc} ({path})") from None

            def fresh(path: Path = path, mtime: float = mtime) -> bool:
                try:
                    return path.stat().st_mtime == mtime
                except OSError:
                    return False

            return source, str(path), fresh
        raise jinja2.TemplateNotFound(template)


def jinja(extra_dirs: tuple[Path, ...] = ()) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=_Loader([*map(str, extra_dirs), str(templates_dir())]),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,  # noqa: S701 - shell, not HTML: values are shell-quoted by `q`
    )
    env.filters["q"] = _quote
    env.filters["oneline"] = lambda text: " ".join(str(text).split())
    env.filters["sq"] = sbatch_options.quote
    env.filters["dq"] = lambda value, key: variables.double_quoted(key, str(value))
    return env


def _slurm_pattern_escape(path: str) -> str:
    """Escape '%' so Slurm's filename patterns (%j, %a) apply only where we put them."""
    if "\\" in path:
        raise UsageError(
            f"log_dir = {as_written(path)}: Slurm disables %-patterns in paths with '\\'"
        )
    return path.replace("%", "%%")


def output_pattern(spec: JobSpec) -> str:
    """The appended job log: ``<log_dir>/<name>-%j.out`` (``%A_%a`` for arrays)."""
    tag = "%A_%a" if spec.is_array else "%j"
    name = LogLayout.JOB.format(name=_slurm_pattern_escape(spec.name), job=tag)
    return f"{_slurm_pattern_escape(spec.log_dir)}/{name}"


# Each attempt's own log, as the batch script names it from its variables.
ATTEMPT_LOG = LogLayout.ATTEMPT.format(
    name=f"${environment.JOB_NAME}", job="$slurmpre_job_tag", attempt="$slurmpre_attempt"
)


def launch_argv(spec: JobSpec) -> list[str]:
    """The command srun runs on every node: the wrapper, then the user's command.

    Values go as ``--flag=value``, so one that starts with ``-`` reaches the wrapper intact.
    """
    argv = [spec.python, "-m", "slurmpre.job", "run"]
    for k in keys.KEYS:  # each key with a flag, in the table's order: it says when and how
        value = getattr(spec, k.name)
        if k.parse == "deadline" and value:  # the login node's zone, as an absolute instant
            value = deadline.pinned(value)
        argv += k.written(value, spec.nodes)
    return [*argv, "--", *spec.command]


def held(spec: JobSpec) -> NodeRange:
    """The nodes the job asks Slurm for: its training nodes and its spares."""
    return NodeRange(spec.nodes.min + spec.spare_nodes, spec.nodes.max + spec.spare_nodes)


def steps_argv(spec: JobSpec) -> list[str]:
    """The batch script's supervisor of steps (`slurmpre.job.handover.steps`), which runs srun
    and restarts in place after a drain (a spare taking a drained node's place, or fewer
    nodes); nothing when the job can do neither (a fixed node count without spares: MIN
    of them must remain)."""
    if not (spec.nodes.elastic or spec.spare_nodes) or not spec.in_place or not spec.watch:
        return []
    argv = [spec.python, "-m", "slurmpre.job", "steps", f"--checkpoint-dir={spec.checkpoint_dir}"]
    if spec.spare_nodes:
        argv.append(f"--spares={spec.spare_nodes}")
    argv += keys.BY_NAME["file_access"].written(spec.file_access)
    return [*argv, "--"]


def srun_options(spec: JobSpec) -> list[str]:
    """One task per node, holding all the CPUs the job asked for on it; a job that may
    run on more than one node labels each line with its node."""
    options = ["--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    if spec.nodes.max > 1:
        # Each line the nodes write starts with the node's place in the attempt ("1: "),
        # so a multi-node log reads node by node (`slurmpre logs --node 1`).
        options.append("--label")
    if spec.cpus_per_task:
        options.append(f"--cpus-per-task={spec.cpus_per_task}")
    return options


_SYSTEM_BIN = {"/bin", "/usr/bin", "/usr/local/bin", "/sbin", "/usr/sbin"}


def python_bin(python: str) -> str | None:
    """The folder of a virtual or conda environment's python, to put first on the job's PATH;
    None for a system interpreter (its folder is on PATH already, in its usual place)."""
    folder = str(Path(python).parent)
    return None if folder in _SYSTEM_BIN else folder


def placeholder(spec: JobSpec) -> Code:
    if spec.snapshot == "none":
        return Code()
    where = f"{spec.checkpoint_dir}/.slurmpre/code/SNAPSHOT-MADE-AT-SUBMIT"
    return Code(identity="snapshot made at submit", root=where, workdir=where)


# A sweep's launch line: the command the task's branch of the script chose.
TASK_COMMAND = '"${slurmpre_command[@]}"'


def _launch(spec: JobSpec, tasks: Sequence[Task]) -> list[str]:
    argv = [shlex.quote(a) for a in launch_argv(spec)]
    if not tasks:
        return argv
    return [*argv[: len(argv) - len(spec.command)], TASK_COMMAND]


def context(
    spec: JobSpec, code: Code, tasks: Sequence[Task] = (), *, expedite: bool = False
) -> dict[str, Any]:
    if tasks and not spec.is_array:
        raise UsageError(f"job {spec.name}: a sweep's tasks need an array")
    requeue = ("--requeue=expedite" if expedite else "--requeue") if spec.requeue else None
    return {
        "requeue": requeue or "--no-requeue",
        "tasks": list(tasks),
        "spec": spec,
        "nodes": held(spec),
        "code": code,
        "version": __version__,
        "output": output_pattern(spec),
        "attempt_log": ATTEMPT_LOG,
        "warn_signal": WARN_SIGNAL.name.removeprefix("SIG"),
        "launch": _launch(spec, tasks),
        "steps": [shlex.quote(a) for a in steps_argv(spec)],
        "srun_options": srun_options(spec),
        "dir_mode": f"{access.NAMES[spec.file_access].dir_mode:04o}",
        "dir_umask": f"{0o777 & ~access.NAMES[spec.file_access].above_mode:03o}",
        "python_bin": python_bin(spec.python),
    }


def render(
    spec: JobSpec, code: Code | None = None, tasks: Sequence[Task] = (), *, expedite: bool = False
) -> str:
    """The sbatch script for ``spec``, from its own template or the default one; ``code``
    is what `slurmpre submit` found of the code (`slurmpre.login.code`): without it (a
    render alone), a snapshot's folder is a placeholder named so. ``expedite``: the
    cluster allows an expedited requeue (`slurm.parse.expedited_requeue`), and the job's
    requeue asks for one."""
    if code is None:
        code = placeholder(spec)
    if spec.template:
        path = Path(spec.template)
        if not path.is_file():
            raise UsageError(f"template = {as_written(spec.template)}: no such file")
        env = jinja((path.parent,))
        name = path.name
    else:
        env = jinja()
        name = DEFAULT_TEMPLATE
    try:
        script = env.get_template(name).render(context(spec, code, tasks, expedite=expedite))
    except jinja2.UndefinedError as exc:
        raise UsageError(f"template {name}: {exc.message}") from None
    except jinja2.TemplateError as exc:
        lineno = getattr(exc, "lineno", None)
        where = f" line {lineno}" if lineno else ""
        raise UsageError(f"template {name}{where}: {exc}") from None
    except RecursionError:
        raise UsageError(
            f"template {name}: it extends or includes itself, directly or through another"
        ) from None
    if tasks and (TASK_COMMAND not in script or "slurmpre_command=(" not in script):
        raise UsageError(
            f"template {name}: a sweep needs the default environment and launch blocks "
            "(each task's command is chosen in the one and run by the other)"
        )
    return script


def directives(script: str) -> list[str]:
    """The ``#SBATCH`` lines sbatch reads from ``script`` (those before its first command,
    sbatch(1)), each without ``#SBATCH``."""
    out = []
    for line in script.split("\n")[1:]:
        if line.strip() and not line.startswith("#"):
            break
        if line.startswith("#SBATCH ") or line.startswith("#SBATCH\t"):
            out.append(line[len("#SBATCH") :].strip())
    return out


def command_line(spec: JobSpec, script: str) -> list[str]:
    """The script's own ``#SBATCH`` options, less the spec's ``extra_sbatch``, as words
    for sbatch's command line, which wins over the script and over the ``SBATCH_*``
    variables that themselves win over it (docs/spec.md, "How `extra_sbatch` is read").
    The lines stay in the script, for whoever reads it."""
    extra = set(spec.extra_sbatch)
    try:
        return [
            word
            for line in directives(script)
            if line not in extra
            for word in sbatch_options.words(line)
        ]
    except sbatch_options.OptionError as exc:
        raise UsageError(f"template: an #SBATCH line sbatch cannot take ({exc})") from None
