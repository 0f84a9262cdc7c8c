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


def run_git(cwd: Path, *args: str) -> str | None:
    try:
        proc = cmd.run(["git", "-C", str(cwd), *args], timeout=120, check=False)
    except CommandError:
        return None  # no git on this machine
    return proc.stdout if proc.returncode == 0 else None


def git_state(cwd: Path) -> GitState | None:
    """The git work tree ``cwd`` is in, its commit and whether it differs; None outside one."""
    top = run_git(cwd, "rev-parse", "--show-toplevel")
    if top is None or not top.strip():
        return None
    commit = run_git(cwd, "rev-parse", "--verify", "--quiet", "HEAD")
    status = run_git(cwd, "status", "--porcelain")
    return GitState(
        Path(top.strip()),
        commit.strip() if commit and commit.strip() else None,
        bool(status and status.strip()),
    )
