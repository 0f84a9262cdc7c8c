"""Which git commit a folder's code is at, and whether its work tree differs from it.

Read on the login node at submit (`slurmpre.login.code`) and by the wrapper at each
attempt's start, where the code a restart runs is the folder's as it is then.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from slurmpre import cmd
from slurmpre.errors import CommandError


@dataclass(frozen=True)
class GitState:
    root: Path  # the work tree's top folder
    commit: str | None  # None: a repository without a commit yet
    dirty: bool

    def describe(self) -> str:
        commit = "no commit yet" if self.commit is None else self.commit[:12]
        return f"git {commit}{' (dirty)' if self.dirty else ''}"


def run_git(cwd: Path, *args: str, timeout: float = 120) -> str | None:
    try:
        proc = cmd.run(["git", "-C", str(cwd), *args], timeout=timeout, check=False)
    except CommandError:
        return None  # no git on this machine, or it took longer than ``timeout``
    return proc.stdout if proc.returncode == 0 else None


def git_state(cwd: Path, timeout: float = 120) -> GitState | None:
    """The git work tree ``cwd`` is in, its commit and whether it differs; None outside
    one, or when git cannot say within ``timeout`` seconds a command (a large tree on
    a slow shared volume: the wrapper will not hold a restart for it)."""
    top = run_git(cwd, "rev-parse", "--show-toplevel", timeout=timeout)
    if top is None or not top.strip():
        return None
    commit = run_git(cwd, "rev-parse", "--verify", "--quiet", "HEAD", timeout=timeout)
    status = run_git(cwd, "status", "--porcelain", timeout=timeout)
    if status is None:
        return None  # whether it differs is not known: say nothing rather than "clean"
    return GitState(
        Path(top.strip()),
        commit.strip() if commit and commit.strip() else None,
        bool(status and status.strip()),
    )
