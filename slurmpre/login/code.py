"""The code a job runs: its identity at submit, and a snapshot every attempt runs from
(``snapshot = "git"``, docs/spec.md).

The copy takes the files git would show, links as links (never followed, so nothing
outside the work tree is read), and never the job's own folders (the copy would grow at
every submit) nor where credentials live (a work tree that is ``$HOME``). It is the
user's alone whatever ``file_access`` says, named by the hash of what it holds
(`slurmpre.folder.snapshot`): node 0 checks both as each attempt starts.
"""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from slurmpre.errors import UsageError
from slurmpre.folder import snapshot as snapshots
from slurmpre.folder import trust
from slurmpre.folder.access import Access, make_dirs
from slurmpre.folder.layout import FolderLayout
from slurmpre.gitstate import GitState, git_state, run_git

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


# Where credentials live: never copied to the shared volume, whatever git says of them.
CREDENTIALS = frozenset({
    ".ssh", ".gnupg", ".aws", ".azure", ".kube", ".docker", ".netrc", ".git-credentials",
    ".pgpass", ".npmrc", ".pypirc", ".vault-token", ".config/gcloud", ".config/gh",
    ".huggingface", ".cache/huggingface/token",
})  # fmt: skip


def listed(root: Path, *, leave_out: tuple[Path, ...] = ()) -> list[str]:
    """The files ``snapshot = "git"`` copies, relative to the work tree's top: tracked
    (a submodule's too) and untracked but not ignored, each once, sorted; never what lies
    in ``leave_out`` (the job's own folders) or where credentials live."""
    tracked = run_git(root, "ls-files", "-z", "--cached", "--recurse-submodules")
    others = run_git(root, "ls-files", "-z", "--others", "--exclude-standard")
    if tracked is None or others is None:
        raise UsageError(f"snapshot = 'git': git cannot list the files of {str(root)!r}")
    top = os.path.realpath(root)
    skip = {
        os.path.relpath(os.path.realpath(p), top)
        for p in leave_out
        if os.path.realpath(p) == top or os.path.realpath(p).startswith(top + os.sep)
    }
    if "." in skip:  # the work tree is inside the job's own folder: nothing would be left
        raise UsageError(
            f"snapshot = 'git': the work tree {str(root)!r} lies inside the job's checkpoint "
            "or log folder"
        )
    names = {n for n in (tracked + others).split("\0") if n}
    return sorted(n for n in names if not _left_out(n, skip))


def _left_out(rel: str, skip: set[str]) -> bool:
    parts = rel.split("/")
    prefixes = {"/".join(parts[: i + 1]) for i in range(len(parts))}
    return bool(prefixes & (skip | CREDENTIALS)) or any(p in CREDENTIALS for p in parts)


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


def snapshot(
    cwd: Path, checkpoint_dir: Path, max_mb: int, mode: Access, *, log_dir: Path | None = None
) -> Code:
    """Copy the code of the work tree ``cwd`` is in to the checkpoint folder (once per
    content), and say where the job starts in it. ``mode`` is the checkpoint folder's
    access; the copy is the user's alone whatever it is."""
    state, entries = to_copy(cwd, checkpoint_dir, max_mb, log_dir=log_dir)
    layout = FolderLayout(checkpoint_dir)
    make_dirs(checkpoint_dir, mode)
    trust.make_own_dir(layout.meta, mode.meta_mode)
    codes = layout.meta / "code"
    trust.make_own_dir(codes, snapshots.DIR_MODE)
    incoming = codes / f".incoming-{os.getpid()}-{os.urandom(4).hex()}"
    incoming.mkdir(mode=snapshots.DIR_MODE)
    try:
        _copy_all(state.root, incoming, entries)
        name = snapshots.name_of(incoming)
        final = codes / name
        if final.exists():
            snapshots.verify(final)  # the same code, copied before: it must still be it
            shutil.rmtree(incoming)
        else:
            incoming.rename(final)
    except BaseException:
        shutil.rmtree(incoming, ignore_errors=True)
        raise
    rel = cwd.resolve().relative_to(state.root.resolve())
    return Code(
        identity=f"snapshot {name} of {state.describe()}",
        root=str(final),
        workdir=str(final / rel),
    )


def to_copy(
    cwd: Path, checkpoint_dir: Path, max_mb: int, *, log_dir: Path | None = None
) -> tuple[GitState, list[_Entry]]:
    """What a snapshot of the work tree ``cwd`` is in would copy, refused (one line) when
    ``cwd`` is in none or the files come to more than ``max_mb``: copies nothing, so
    `submit --dry-run` checks it too."""
    state = git_state(cwd)
    if state is None:
        raise UsageError(
            f"snapshot = 'git': {str(cwd)!r} is not in a git work tree (submit from your "
            "repository, or set snapshot = 'none')"
        )
    leave_out = (checkpoint_dir,) + ((log_dir,) if log_dir is not None else ())
    entries = _entries(state.root, listed(state.root, leave_out=leave_out))
    total = sum(e.size for e in entries)
    if total > max_mb * 1_000_000:
        largest = sorted(entries, key=lambda e: -e.size)[:3]
        names = ", ".join(f"{e.rel} {_mb(e.size)}" for e in largest)
        raise UsageError(
            f"snapshot = 'git': the files to copy from {str(state.root)!r} come to "
            f"{_mb(total)}, over snapshot_max_mb = {max_mb} (largest: {names}): ignore "
            "data and outputs in .gitignore, or raise snapshot_max_mb"
        )
    return state, entries


def _copy_all(root: Path, into: Path, entries: list[_Entry]) -> None:
    for e in entries:
        src, dst = root / e.rel, into / e.rel
        _folders(into, dst.parent)
        if stat.S_ISLNK(e.mode):
            dst.symlink_to(src.readlink())
        else:
            _copy(src, dst, e.mode)


def _folders(top: Path, folder: Path) -> None:
    """``mkdir -p`` below ``top``, each folder the user's alone."""
    missing = []
    while folder != top and not folder.is_dir():
        missing.append(folder)
        folder = folder.parent
    for f in reversed(missing):
        f.mkdir(mode=snapshots.DIR_MODE)
        f.chmod(snapshots.DIR_MODE)


def _copy(src: Path, dst: Path, mode: int) -> None:
    fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as fin, dst.open("xb") as fout:
        shutil.copyfileobj(fin, fout, CHUNK)
    dst.chmod(snapshots.file_mode(mode))  # executables stay executable; the owner's alone
