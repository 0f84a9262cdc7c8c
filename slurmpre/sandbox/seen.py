"""What a sandbox's nodes can run: the interpreter a job on a Debian root runs, and why
a python the login side names would not be found on the nodes (`slurmpre submit`'s check)."""

from __future__ import annotations

import sys
from pathlib import Path

from slurmpre.sandbox.reach import slurm_dir
from slurmpre.sandbox.roots import ROOTS_DIR, Root, inside


def unseen(python: str, path: str, roots_dir: Path = ROOTS_DIR) -> str | None:
    """Why the nodes of a sandbox cannot run ``python``, when the first Slurm commands on
    ``path`` (a PATH) are a root's (`slurm_path`) and ``python`` is not there: a root sees
    /tmp, /home and the environment that brought the sandbox up, not another checkout's
    venv. None otherwise (the host's Slurm, or a python the root sees)."""
    shims = slurm_dir(path)
    if shims is None or shims.parent != roots_dir or not shims.name.endswith("-bin"):
        return None  # the host's Slurm (or none): the nodes see what this machine sees
    root = roots_dir / shims.name.removesuffix("-bin")
    if inside(root, python):
        return None
    return (
        f"python = {python!r} is not inside the sandbox's Debian {root.name} root, so "
        "its nodes cannot run it (the root sees /tmp, /home and the environment that "
        "brought the sandbox up): run `slurmpre sandbox down` and `slurmpre sandbox up` "
        "from this environment, or keep it under /home"
    )


def job_python(root: Root | None, state_dir: Path) -> str:
    """The interpreter a job on this sandbox runs: this one, on the host's Slurm or where
    a root carries it (`interpreter`); else the root's own python with slurmpre."""
    if root is None or all(
        not Path(p).resolve().is_relative_to("/usr") for p in (sys.prefix, sys.base_prefix)
    ):
        return sys.executable
    return str(Root.python(state_dir))
