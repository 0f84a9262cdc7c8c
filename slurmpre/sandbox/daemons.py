"""Starting the sandbox's daemons: each in a session of its own, output to its log;
munged first, as user munge (inside a root when the sandbox runs one)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from slurmpre import procs
from slurmpre.cmd import run
from slurmpre.errors import CommandError, SandboxError
from slurmpre.sandbox.config import State
from slurmpre.sandbox.host import EXECUTABLES
from slurmpre.sandbox.instance import FIRST
from slurmpre.sandbox.roots import ROOTS_DIR, Root
from slurmpre.slurm.client import CommandLineSlurm
from slurmpre.slurm.parse import NodeInfo


def spawn_detached(argv: list[str], log: Path, **ids: Any) -> subprocess.Popen[bytes]:
    """``argv`` in a session of its own (as ``user``/``group`` in ``ids``, when given),
    its output appended to ``log``."""
    with log.open("ab") as out:
        try:
            return subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **ids,
            )
        except OSError as exc:
            raise SandboxError(f"cannot start {argv[0]}: {exc}") from None


def munge_works(root: Root | None = None, timeout: float = 15.0) -> bool:
    wrap = (lambda argv: argv) if root is None else root.argv
    try:
        encoded = run(wrap(["munge", "-n"]), timeout=timeout, error=SandboxError).stdout
        run(wrap(["unmunge"]), input=encoded, timeout=timeout, error=SandboxError)
    except SandboxError:
        return False
    return True


def _ids_in(root: Root, user: str) -> tuple[int, int]:
    """A user's uid and gid as the root's /etc/passwd has them (not the host's)."""
    for line in (root.path / "etc/passwd").read_text().splitlines():
        fields = line.split(":")
        if len(fields) > 3 and fields[0] == user:
            return int(fields[2]), int(fields[3])
    raise SandboxError(f"the root {root.path} has no user {user}")


def _live_munged(run_dir: Path) -> int | None:
    """The pid of the munged that holds ``run_dir``'s socket, while it lives."""
    try:
        pid = int((run_dir / "munged.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if procs.is_process_of(pid, "munged") else None


def start_munge(log_dir: Path, root: Root | None = None) -> int | None:
    """Start munged as user munge, unless a munged is already there (then None)."""
    if munge_works(root):
        return None
    run_dir = Path("/run/munge") if root is None else root.path / "run/munge"
    live = _live_munged(run_dir)
    if live is not None:
        # Alive but slow to answer (a loaded machine): never a second one beside it. With
        # --force it would take the socket, and remove it on exit, leaving every sandbox
        # that shares this munged without one.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if munge_works(root):
                return None
            time.sleep(1.0)
        raise SandboxError(f"munged (pid {live}) runs but has not answered for a minute")
    run_dir.mkdir(parents=True, exist_ok=True)
    if root is None:
        shutil.chown(run_dir, "munge", "munge")
        argv = [EXECUTABLES["munged"]]
        ids: dict[str, Any] = {"user": "munge", "group": "munge"}
    else:
        uid, gid = _ids_in(root, "munge")
        os.chown(run_dir, uid, gid)
        argv = ["chroot", f"--userspec={uid}:{gid}", str(root.path), EXECUTABLES["munged"]]
        ids = {}
    proc = spawn_detached([*argv, "-F", "--force"], log_dir / "munged.out", **ids)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        if munge_works(root):
            return proc.pid
        time.sleep(0.1)
    tail = (log_dir / "munged.out").read_text(errors="replace").strip().splitlines()[-3:]
    raise SandboxError("munged did not start: " + (" | ".join(tail) or "no output"))


# Log lines that every healthy start prints and that explain nothing.
_NOISE = ("pmix", "PMIx", "socket/core boundaries", "Couldn't load specified plugin name for mpi")


def log_excerpt(log_dir: Path, lines: int = 12) -> str:
    """The error lines of the daemons' logs that explain something, for a failed start."""
    picked: list[str] = []
    for log in sorted(log_dir.glob("*.log")) + sorted(log_dir.glob("*.out")):
        for line in log.read_text(errors="replace").splitlines():
            low = line.lower()
            if ("error" in low or "fatal" in low) and not any(n in line for n in _NOISE):
                picked.append(f"    {log.name}: {line.strip()}")
    if not picked:
        return ""
    return "\nlog lines that matter:\n" + "\n".join(picked[-lines:])


def running(node: str | None = None, conf: str = str(FIRST.conf)) -> set[int]:
    """The daemons of the sandbox whose slurm.conf is ``conf``, recorded or not (a killed
    helper can leave one holding a port), or only the slurmds of ``node``: started as the
    sandbox starts them (``-D``, ``-f conf``, a slurmd with ``-N``), on the host or in a
    Debian root; a system's own (systemd's, without ``-f``) never. See docs/sandbox.md."""
    roots = str(ROOTS_DIR).rstrip("/") + "/"
    found = set()
    for pid in procs.pids():
        argv = procs.cmdline(pid)
        if not argv or Path(argv[0]).name not in ("slurmd", "slurmctld"):
            continue
        flags = set(argv[1:])
        if "-D" not in flags or "-f" not in argv[:-1] or argv[argv.index("-f") + 1] != conf:
            continue
        if Path(argv[0]).name == "slurmd" and "-N" not in flags:
            continue
        if node is not None and _named(argv) != node:  # slurmctld has no -N
            continue
        root = procs.root_of(pid)
        if root == "/" or (root is not None and root.startswith(roots)):
            found.add(pid)
    return found


def _named(argv: list[str]) -> str | None:
    """The node a slurmd runs as (``-N NAME``)."""
    at = argv.index("-N") if "-N" in argv[:-1] else None
    return None if at is None else argv[at + 1]


def require_multiple_slurmd(env: dict[str, str]) -> None:
    """Several slurmd on one host need a build with MULTIPLE_SLURMD."""
    conf = run(["scontrol", "show", "config"], env=env, error=SandboxError).stdout
    for line in conf.splitlines():
        if line.replace(" ", "").lower().startswith("multiple_slurmd=yes"):
            return
    raise SandboxError(
        "this Slurm build cannot run several slurmd on one host (MULTIPLE_SLURMD is not Yes); "
        "use `slurmpre sandbox up --nodes 1`"
    )


def wait_ctld(env: dict[str, str], log_dir: Path, timeout: float) -> None:
    """Until slurmctld answers a ping; a SandboxError with its log's end after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            run(["scontrol", "ping"], timeout=5, env=env, error=SandboxError)
            return
        except SandboxError:
            if time.monotonic() > deadline:
                raise SandboxError(
                    f"slurmctld did not answer within {timeout:g} s{log_excerpt(log_dir)}"
                ) from None
        time.sleep(0.2)


def wait_nodes_up(client: CommandLineSlurm, state: State, log_dir: Path, timeout: float) -> None:
    """Wait until every node has registered and is not DOWN or unknown."""
    names = {n["name"] for n in state.nodes}
    deadline = time.monotonic() + timeout
    last: list[NodeInfo] = []
    while time.monotonic() < deadline:
        try:
            last = [n for n in client.nodes() if n.name in names]
        except CommandError:
            last = []
        if len(last) == len(names) and all(
            not n.down and n.state not in ("UNKNOWN", "FUTURE") for n in last
        ):
            return
        time.sleep(0.2)
    seen = ", ".join(f"{n.name}={n.state}" for n in last) or "no answer"
    raise SandboxError(
        f"sandbox nodes did not come up within {timeout:g} s ({seen}){log_excerpt(log_dir)}"
    )


# How a helper runs (`preempt.start_in_background`): after the python, then the node.
HELPER_COMMAND = ("-m", "slurmpre", "sandbox", "preempt")


def helpers_running(state: State) -> set[int]:
    """The recorded helpers that still run. A helper's pid, once it has ended, is soon
    another process's (pids wrap at 32768 on many hosts): only a process that runs as
    this sandbox's helper, for one of its nodes, is one."""
    nodes = {n["name"] for n in state.nodes}
    found = set()
    for pid in state.helpers:
        argv = procs.cmdline(pid)
        ours = tuple(argv[1:5]) == HELPER_COMMAND and len(argv) > 5 and argv[5] in nodes
        if ours and procs.alive(pid):
            found.add(pid)
    return found
