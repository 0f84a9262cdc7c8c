"""What the host must have for the sandbox: root, Slurm's packages, free ports, the
config files the sandbox manages, and which Debian suite it runs."""

from __future__ import annotations

import logging
import os
import shutil
import socket
from collections.abc import Sequence
from pathlib import Path

from slurmpre.cmd import run
from slurmpre.errors import SandboxError
from slurmpre.sandbox.config import MARKER
from slurmpre.sandbox.roots import SUITES

LOG = logging.getLogger(__name__)

PACKAGES = ("munge", "slurmctld", "slurmd", "slurm-client")
EXECUTABLES = {
    "munged": "/usr/sbin/munged",
    "slurmctld": "/usr/sbin/slurmctld",
    "slurmd": "/usr/sbin/slurmd",
    "sbatch": "/usr/bin/sbatch",
}


def require_root() -> None:
    if os.geteuid() != 0:
        raise SandboxError(
            "the sandbox runs Slurm's daemons and must be run as root (try: sudo slurmpre ...)"
        )


def remove_managed(path: Path) -> None:
    """Remove a config file the sandbox wrote earlier (never one it did not write)."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return
    if MARKER in text:
        path.unlink()


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def ensure_installed() -> None:
    missing = [name for name, path in EXECUTABLES.items() if not Path(path).exists()]
    if missing:
        apt_install(PACKAGES, "Slurm", missing)


def apt_install(packages: Sequence[str], what: str, missing: Sequence[str]) -> None:
    """Install Debian ``packages`` with apt-get: ``what`` they are, for the ``missing`` files."""
    if shutil.which("apt-get") is None:
        raise SandboxError(
            f"{what} is not installed ({', '.join(missing)} missing) and there is no apt-get"
        )
    LOG.info(f"installing {' '.join(packages)} (missing: {', '.join(missing)})")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        run(["apt-get", "update", "-qq"], timeout=600, env=env, error=SandboxError)
        run(
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages],
            timeout=900,
            env=env,
            error=SandboxError,
        )
    except SandboxError as exc:
        first = str(exc).splitlines()
        detail = next((ln.strip() for ln in reversed(first) if ln.strip()), str(exc))
        raise SandboxError(f"could not install {what} with apt-get: {detail}") from None


def host_suite() -> str | None:
    """The host's Debian suite (its packages' Slurm), from /etc/os-release."""
    try:
        text = Path("/etc/os-release").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("VERSION_CODENAME="):
            name = line.partition("=")[2].strip().strip('"')
            return name if name in SUITES.values() else None
    return None
