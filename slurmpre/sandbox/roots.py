"""A Slurm other than the host's: a Debian root made with debootstrap, entered with chroot.

The root is made once per suite and cached; the folders jobs use, slurmpre's source and
the interpreter that starts the sandbox (read-only) are bound in at their own paths, so
a path and a spec's ``python`` mean the same inside and outside; the host reaches the
root's Slurm through shims on ``PATH``. See docs/sandbox.md ("Versions").
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from slurmpre import environment
from slurmpre.atomic import write_atomic
from slurmpre.cmd import run
from slurmpre.errors import SandboxError, UsageError

LOG = logging.getLogger(__name__)

ROOTS_DIR = Path(os.environ.get(environment.ROOTS_DIR, "/var/cache/slurmpre/roots"))
MIRROR = os.environ.get(environment.DEBIAN_MIRROR, "http://deb.debian.org/debian")
# The kernel's folders a root sees, and whether their own mounts come along (rbind).
SYSTEM_BINDS = ((Path("/proc"), False), (Path("/sys"), True), (Path("/dev"), True))
# Slurm release -> the Debian suite that ships it.
SUITES = {"22.05": "bookworm", "24.11": "trixie", "26.05": "sid"}
# The provider's release (Slinky needs 25.11 or later): what the sandbox, the drill and
# the end-to-end tests run unless told otherwise.
DEFAULT_RELEASE = "26.05"
PACKAGES = (
    "slurmd",
    "slurmctld",
    "slurm-client",
    "munge",
    "python3",
    "python3-jinja2",
    "python3-click",
    "python3-filelock",
    "procps",
    "git",  # an attempt without a snapshot names the commit it runs, as on a real cluster
)
# What a root made before a package joined PACKAGES gets at its next use: package -> file.
LATER = {"git": "/usr/bin/git"}
# The Slurm commands the host reaches through shims.
CLIENTS = (
    "scontrol", "sbatch", "squeue", "sinfo", "scancel", "srun", "salloc", "sacct", "sprio", "sdiag",
)  # fmt: skip
READY = ".slurmpre-root"  # written last: a root without it is half made
# Login shells read it (Debian's /etc/profile sets PATH anew): the root's commands first.
PROFILE = Path(os.environ.get(environment.SANDBOX_PROFILE, "/etc/profile.d/slurmpre-sandbox.sh"))


def suite_of(version: str) -> str:
    try:
        return SUITES[version]
    except KeyError:
        known = ", ".join(SUITES)
        raise UsageError(f"--slurm {version!r} is not one of {known}") from None


def source_dir() -> Path:
    """The folder that holds the ``slurmpre`` package (bound into the root)."""
    return Path(__file__).resolve().parents[2]  # slurmpre/sandbox/roots.py


@dataclass(frozen=True)
class Root:
    """One suite's root; ``path`` is where it lives on the host."""

    suite: str
    path: Path

    @classmethod
    def for_version(cls, version: str, roots_dir: Path = ROOTS_DIR) -> Root:
        suite = suite_of(version)
        return cls(suite, roots_dir / suite)

    # -- commands -------------------------------------------------------------
    def argv(self, argv: list[str]) -> list[str]:
        """``argv`` run inside the root."""
        return ["chroot", str(self.path), *argv]

    @property
    def shims(self) -> Path:
        return self.path.parent / f"{self.suite}-bin"

    # -- making it ------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return (self.path / READY).exists()

    def ensure(self) -> None:
        """Make the root once (debootstrap from Debian's registry), then reuse it.

        One maker at a time: a second `up --slurm` or `sandbox fetch` of the same
        release waits for the first, then finds the root made.
        """
        from filelock import FileLock, Timeout  # here: `reach` reads this module as commands start

        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(self.path.with_name(self.path.name + ".lock")))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            LOG.info(f"waiting for the Debian {self.suite} root another process is making")
            lock.acquire()
        try:
            if not self.ready:
                self._bootstrap()
            self._add_later()
            self._install_slurmpre()
            self._write_shims()
        finally:
            lock.release()

    def _bootstrap(self) -> None:
        if shutil.which("debootstrap") is None:
            LOG.info("installing debootstrap")
            env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
            run(["apt-get", "update", "-qq"], timeout=600, env=env, error=SandboxError)
            run(
                ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "debootstrap"],
                timeout=600,
                env=env,
                error=SandboxError,
            )
        if not Path("/usr/share/debootstrap/scripts", self.suite).exists():
            raise SandboxError(f"this debootstrap has no script for Debian {self.suite}")
        work = self.path.with_name(self.path.name + ".incoming")
        self._unmount_under(work)
        shutil.rmtree(work, ignore_errors=True)
        work.parent.mkdir(parents=True, exist_ok=True)
        LOG.info(
            f"making a Debian {self.suite} root with its Slurm in {self.path} (about a minute)"
        )
        try:
            run(
                [
                    "debootstrap",
                    "--variant=minbase",
                    f"--include={','.join(PACKAGES)}",
                    self.suite,
                    str(work),
                    MIRROR,
                ],
                timeout=1800,
                error=SandboxError,
            )
        except SandboxError as exc:
            tail = [ln for ln in str(exc).splitlines() if ln.strip()][-1:]
            raise SandboxError(
                f"debootstrap of Debian {self.suite} failed: {tail[0] if tail else exc}"
            ) from None
        self._check_made(work)
        (work / READY).write_text(f"{self.suite}\n")
        self._unmount_under(self.path)
        shutil.rmtree(self.path, ignore_errors=True)
        work.rename(self.path)

    def _check_made(self, work: Path) -> None:
        # Looked up inside the root: sid's slurmd is a link to /etc/alternatives/slurmd,
        # a path of the root that a fresh host does not have.
        if not inside(work, "/usr/sbin/slurmd"):
            raise SandboxError(f"the Debian {self.suite} root has no slurmd")

    def _add_later(self) -> None:
        """Install into a cached root the packages added to PACKAGES since it was made
        (from the package lists it has: a frozen suite's Release may have expired)."""
        missing = [name for name, path in LATER.items() if not inside(self.path, path)]
        if not missing:
            return
        LOG.info(f"adding {', '.join(missing)} to the Debian {self.suite} root")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        try:
            run(
                self.argv(["apt-get", "install", "-y", "-qq", "--no-install-recommends",
                           "-o", "Acquire::Check-Valid-Until=false", *missing]),
                timeout=600,
                env=env,
                error=SandboxError,
            )  # fmt: skip
        except SandboxError as exc:
            tail = [ln for ln in str(exc).splitlines() if ln.strip()][-1:]
            raise SandboxError(
                f"could not add {', '.join(missing)} to the Debian {self.suite} root: "
                f"{tail[0] if tail else exc}"
            ) from None

    def _install_slurmpre(self) -> None:
        """A .pth naming slurmpre's source in the root's python, and a `slurmpre` command."""
        found = sorted((self.path / "usr/lib").glob("python3*/"))
        found = [p for p in found if (p / "os.py").exists()]
        if not found:
            raise SandboxError(f"the root {self.path} has no python3")
        site = Path("/usr/local/lib") / found[-1].name / "dist-packages"
        (self.path / site.relative_to("/")).mkdir(parents=True, exist_ok=True)
        # Replaced whole, only when changed: a sandbox beside may be starting python in it.
        # (Its `root-python3` names its own checkout's source first: `_write_python`.)
        pth = self.path / site.relative_to("/") / "slurmpre-source.pth"
        _write_script(pth, f"{source_dir()}\n", mode=0o644)
        _write_script(
            self.path / "usr/local/bin/slurmpre",
            "#!/usr/bin/python3\nimport sys\nfrom slurmpre.cli import main\nsys.exit(main())\n",
        )

    def _write_shims(self) -> None:
        self.shims.mkdir(parents=True, exist_ok=True)
        for name in CLIENTS:
            # The command runs in the caller's folder: every folder a job uses is bound
            # into the root at its own path.
            _write_script(
                self.shims / name,
                "#!/bin/sh\n"
                f"# slurmpre sandbox: {name} of the Debian {self.suite} root\n"
                f"exec chroot {self.path} /bin/sh -c "
                '\'cd "$1" 2>/dev/null || cd /; shift; exec "$0" "$@"\' '
                f'{name} "$PWD" "$@"\n',
            )

    @staticmethod
    def python(state_dir: Path) -> Path:
        """The root's python with slurmpre, at a path that works inside and outside it."""
        return state_dir / "root-python3"

    def _write_python(self, state_dir: Path) -> None:
        # Inside the root (a job's nodes) it is the root's python; on the host (where
        # `slurmpre submit` checks the spec's python) it enters the root first. Either way
        # with the slurmpre of the checkout that brought this sandbox up (another sandbox
        # in the same root may come from another checkout).
        _write_script(
            self.python(state_dir),
            "#!/bin/sh\n"
            f"# slurmpre sandbox: the python of the Debian {self.suite} root, with slurmpre\n"
            f"PYTHONPATH={shlex.quote(str(source_dir()))}${{PYTHONPATH:+:$PYTHONPATH}}\n"
            "export PYTHONPATH\n"
            f'if [ -e /{READY} ]; then exec /usr/bin/python3 "$@"; fi\n'
            f"exec chroot {self.path} /bin/sh -c "
            '\'cd "$1" 2>/dev/null || cd /; shift; exec /usr/bin/python3 "$@"\' '
            'python3 "$PWD" "$@"\n',
        )

    # -- mounts ---------------------------------------------------------------
    def binds(self, state_dir: Path) -> list[Path]:
        """Host folders bound into the root at their own paths, in mount order."""
        shared = [Path("/tmp"), Path("/home"), state_dir.parent, source_dir(), *interpreter()]
        out: list[Path] = []
        for p in shared:
            if p not in out and not any(p.is_relative_to(q) for q in out):
                out.append(p)
        return out

    def mount(self, state_dir: Path, *, keep: bool = False) -> None:
        """Bind /proc, /sys, /dev and the shared folders (`unmount` finds them all again);
        ``keep``: another sandbox runs in this root, whose mounts stay as they are (the
        folders this one needs and the other's lack, such as another checkout's venv,
        are bound beside them)."""
        if not keep:
            self.unmount()
        try:
            if not keep:
                for src, rbind in SYSTEM_BINDS:
                    self._bind(src, rbind=rbind)
            there = set(mounts_under(str(self.path).rstrip("/") + "/"))
            for src in self.binds(state_dir):
                if str(self.path / src.relative_to("/")) in there:
                    continue
                src.mkdir(parents=True, exist_ok=True)
                self._bind(src, rbind=False, read_only=src in interpreter())
        except SandboxError:
            if not keep:
                self.unmount()
            raise
        self._write_python(state_dir)
        self.write_profile()
        # Names resolve as on the host (the sandbox's nodes all live at its hostname).
        for name in ("hosts", "resolv.conf"):
            with_host = Path("/etc", name)
            if with_host.exists():
                _write_script(self.path / "etc" / name, with_host.read_text(), mode=0o644)

    def _bind(self, src: Path, *, rbind: bool, read_only: bool = False) -> None:
        target = self.path / src.relative_to("/")
        target.mkdir(parents=True, exist_ok=True)
        run(
            ["mount", "--rbind" if rbind else "--bind", str(src), str(target)],
            timeout=30,
            error=SandboxError,
        )
        if rbind:  # a later unmount of the root's copy must not reach the host's
            run(["mount", "--make-rslave", str(target)], timeout=30, error=SandboxError)
        if read_only:  # a job in the root can run the host's Python, not change it
            run(["mount", "-o", "remount,bind,ro", str(target)], timeout=30, error=SandboxError)

    def unmount(self) -> None:
        self._unmount_under(self.path)
        PROFILE.unlink(missing_ok=True)

    def write_profile(self) -> None:
        """A new login shell finds this root's Slurm commands first (the host's own would
        talk to no controller), until `down`."""
        if PROFILE.parent.is_dir():
            PROFILE.write_text(
                f"# slurmpre sandbox: Slurm of the Debian {self.suite} root, until `sandbox down`\n"
                f'case ":$PATH:" in *":{self.shims}:"*) ;; *) PATH="{self.shims}:$PATH" ;; esac\n'
                "export PATH\n"
            )

    @staticmethod
    def _unmount_under(path: Path) -> None:
        """Every mount at or under ``path``, deepest first (lazy, so a busy one goes too)."""
        prefix = str(path).rstrip("/") + "/"
        for point in sorted(mounts_under(prefix), key=len, reverse=True):
            run(["umount", "-l", point], check=False)


def interpreter(prefixes: tuple[str, ...] | None = None) -> list[Path]:
    """The folders of the Python running this (its venv, and the installation the venv
    was made from) that a root must see to run it at the same path: none under ``/usr``
    or at ``/``, which are the root's own (a system Python is not carried over)."""
    found = prefixes if prefixes is not None else (sys.prefix, sys.base_prefix)
    out: list[Path] = []
    for raw in found:
        p = Path(raw).resolve()
        if p == Path("/") or p.is_relative_to("/usr") or p in out:
            continue
        out.append(p)
    return out


def inside(root: Path, path: str, hops: int = 40) -> bool:
    """``path`` exists inside ``root``, its links followed there (an absolute link names a
    path of the root, not of the host)."""
    here = os.path.normpath(path)
    for _ in range(hops):
        on_host = root / here.lstrip("/")
        if not on_host.is_symlink():
            return on_host.exists()
        target = str(on_host.readlink())
        parent = Path(here).parent
        here = os.path.normpath(target if target.startswith("/") else f"{parent}/{target}")
    return False


def slurm_path(path: str, root: Root | None) -> str:
    """``path`` (a PATH) with the root's Slurm commands first, and no other root's;
    with no root, the host's commands again (no root's shims)."""
    parts = path.split(os.pathsep) if path else []
    kept = [p for p in parts if not (p.endswith("-bin") and Path(p).parent == ROOTS_DIR)]
    return os.pathsep.join(kept if root is None else [str(root.shims), *kept])


def _write_script(path: Path, text: str, mode: int = 0o755) -> None:
    """A script, or a file a running root reads: replaced whole (never truncated while a
    sandbox beside this one reads it), and only when its text changes."""
    try:
        if path.read_text() == text:
            return
    except OSError:
        pass
    write_atomic(path, text, mode=mode)


def mounts() -> list[tuple[str, str]]:
    """(source, mount point) of every mount, from /proc/mounts, escapes undone."""
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return []

    def undo(field: str) -> str:
        return field.encode().decode("unicode_escape").encode("latin-1").decode(errors="replace")

    return [(undo(f[0]), undo(f[1])) for f in map(str.split, lines) if len(f) >= 2]


def mounts_under(prefix: str) -> list[str]:
    """Mount points that start with ``prefix``."""
    return [point for _, point in mounts() if point.startswith(prefix)]
