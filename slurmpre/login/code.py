"""The code a job runs: its identity at submit, and a snapshot every attempt runs from.

A job runs from the folder it was submitted from, so an edit during a two-day job
changes what the next requeue runs, silently. slurmpre records, at every submit,
which code that was: the git commit of the submit folder and whether the work tree
differed from it (``git status --porcelain``: changed, staged or untracked files);
nothing when it is not in a git work tree. With ``snapshot = "git"`` it also copies
the files git would show (tracked, and untracked but not ignored; a submodule's
tracked files too) once, into ``<checkpoint_dir>/.slurmpre/code/<hash>/``, and every
attempt, successors and requeues included, runs from that copy. The hash (sha256 of
every path, mode and content, in order) names the copy and is its identity: the same
code submitted twice shares one copy. Links are copied as links, never followed, so
nothing outside the work tree is read. A snapshot larger than ``snapshot_max_mb`` is
refused before anything is copied, naming the largest files.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from slurmpre.access import Access, make_dirs
from slurmpre.errors import UsageError
from slurmpre.gitstate import git_state, run_git
from slurmpre.job.layout import FolderLayout

CHUNK = 1 << 20


@dataclass(frozen=True)
class Code:
    """What a job runs, as rendered into its script."""

    identity: str | None = None  # "git 1a2b3c4d5e6f (dirty)", "snapshot 3f2a...: git ..."
    root: str | None = None  # the snapshot's top folder (SLURMPRE_CODE_DIR)
    workdir: str | None = None  # where the job starts: the submit folder, inside the copy


def identify(cwd: Path) -> Code:
    """The identity of the code in ``cwd``, without a snapshot (recorded at every submit)."""
    state = git_state(cwd)
    return Code(identity=None if state is None else state.describe())


def listed(root: Path) -> list[str]:
    """The files ``snapshot = "git"`` copies, relative to the work tree's top: tracked
    (a submodule's too) and untracked but not ignored, each once, sorted."""
    tracked = run_git(root, "ls-files", "-z", "--cached", "--recurse-submodules")
    others = run_git(root, "ls-files", "-z", "--others", "--exclude-standard")
    if tracked is None or others is None:
        raise UsageError(f"snapshot = 'git': git cannot list the files of {str(root)!r}")
    names = {n for n in (tracked + others).split("\0") if n}
    return sorted(names)


@dataclass(frozen=True)
class _Entry:
    rel: str
    mode: int
    size: int


def _entries(root: Path, names: list[str]) -> list[_Entry]:
    out = []
    for rel in names:
        try:
            st = os.lstat(root / rel)
        except FileNotFoundError:
            continue  # tracked, deleted in the work tree: not part of the code on disk
        if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
            out.append(_Entry(rel, st.st_mode, st.st_size if stat.S_ISREG(st.st_mode) else 0))
    return out


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def snapshot(cwd: Path, checkpoint_dir: Path, max_mb: int, mode: Access) -> Code:
    """Copy the code of the work tree ``cwd`` is in to the checkpoint folder (once per
    content), and say where the job starts in it."""
    state = git_state(cwd)
    if state is None:
        raise UsageError(
            f"snapshot = 'git': {str(cwd)!r} is not in a git work tree (submit from your "
            "repository, or set snapshot = 'none')"
        )
    entries = _entries(state.root, listed(state.root))
    total = sum(e.size for e in entries)
    if total > max_mb * 1_000_000:
        largest = sorted(entries, key=lambda e: -e.size)[:3]
        names = ", ".join(f"{e.rel} {_mb(e.size)}" for e in largest)
        raise UsageError(
            f"snapshot = 'git': the files to copy from {str(state.root)!r} come to "
            f"{_mb(total)}, over snapshot_max_mb = {max_mb} (largest: {names}): ignore "
            "data and outputs in .gitignore, or raise snapshot_max_mb"
        )
    codes = FolderLayout(checkpoint_dir).meta / "code"
    make_dirs(codes, mode)
    incoming = codes / f".incoming-{os.getpid()}"
    if incoming.exists():
        shutil.rmtree(incoming)
    digest = hashlib.sha256()
    for e in entries:
        src, dst = state.root / e.rel, incoming / e.rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        digest.update(f"{e.rel}\0{stat.S_IMODE(e.mode):o}\0".encode())
        if stat.S_ISLNK(e.mode):
            target = str(src.readlink())
            digest.update(b"link\0" + target.encode())
            dst.symlink_to(target)
        else:
            _copy(src, dst, e.mode, digest)
        digest.update(b"\0")
    name = digest.hexdigest()[:16]
    final = codes / name
    if final.exists():
        shutil.rmtree(incoming)  # the same code, copied before
    else:
        incoming.rename(final)
    rel = cwd.resolve().relative_to(state.root.resolve())
    return Code(
        identity=f"snapshot {name} of {state.describe()}",
        root=str(final),
        workdir=str(final / rel),
    )


def _copy(src: Path, dst: Path, mode: int, digest: hashlib._Hash) -> None:
    with src.open("rb") as fin, dst.open("xb") as fout:
        while chunk := fin.read(CHUNK):
            digest.update(chunk)
            fout.write(chunk)
    dst.chmod(stat.S_IMODE(mode) & 0o755 | 0o400)  # executables stay executable; owner reads
