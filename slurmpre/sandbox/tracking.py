"""How the sandbox tracks a job's processes: proctrack/cgroup where the host mounts the
cgroup v1 controllers Slurm needs, else by process group; and cleaning the cgroups of a
sandbox that is gone."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from slurmpre import procs
from slurmpre.errors import SandboxError
from slurmpre.sandbox.config import CGROUP, PGID, TRACKINGS, Tracking
from slurmpre.sandbox.roots import Root

LOG = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")


def clean_cgroups(nodes: list[str], root: Path = CGROUP_ROOT) -> list[Path]:
    """Remove the ``slurm_<node>`` cgroup v1 trees of these nodes, deepest first, after
    killing any process still in them (they belong to jobs of a sandbox that is gone)."""
    removed: list[Path] = []
    for tree in sorted(root.glob("*/slurm_*")):
        if tree.name.removeprefix("slurm_") not in nodes or not tree.is_dir():
            continue
        dirs = sorted((p for p in tree.rglob("*") if p.is_dir()), key=lambda p: len(p.parts))
        for cgroup in [*reversed(dirs), tree]:
            try:
                pids = {int(x) for x in (cgroup / "cgroup.procs").read_text().split()}
            except (OSError, ValueError):
                pids = set()
            procs.kill_now(pids)
            try:
                cgroup.rmdir()
                removed.append(cgroup)
            except OSError:
                pass
    return removed


CGROUP_V1_CONTROLLERS = ("freezer", "cpuset")  # proctrack/cgroup, and task/cgroup's cores


def cgroup_v1_controllers(mounts: str) -> set[str]:
    """The cgroup v1 controllers mounted, from /proc/mounts text."""
    found: set[str] = set()
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] == "cgroup":
            found |= set(fields[3].split(","))
    return found


def slurm_plugins(root: Root | None = None) -> set[str] | None:
    """The plugin names Slurm's packages installed (``cgroup_v1``, ...); None if unknown."""
    base = Path("/") if root is None else root.path
    found = set()
    for lib in base.glob("usr/lib/*/slurm-wlm"):
        found |= {p.name.removesuffix(".so") for p in lib.glob("*.so")}
    return found or None


def choose_tracking(wanted: str, plugins: set[str] | None = None) -> Tracking:
    """``cgroup`` where the host mounts the cgroup v1 controllers Slurm needs, else ``pgid``
    (under cgroup v1 each slurmd keeps its own hierarchy; the v2 plugin wants systemd)."""
    if wanted in TRACKINGS and wanted != CGROUP.name:
        return TRACKINGS[wanted]
    if plugins is not None and "cgroup_v1" not in plugins:
        if wanted == CGROUP.name:
            raise SandboxError("--tracking cgroup: this Slurm has no cgroup/v1 plugin")
        LOG.info("this Slurm has no cgroup/v1 plugin: tracking processes by pgid")
        return PGID
    try:
        mounts = Path("/proc/mounts").read_text()
    except OSError:
        mounts = ""
    missing = [c for c in CGROUP_V1_CONTROLLERS if c not in cgroup_v1_controllers(mounts)]
    writable = all(os.access(f"/sys/fs/cgroup/{c}", os.W_OK) for c in CGROUP_V1_CONTROLLERS)
    if not missing and writable:
        return CGROUP
    why = f"cgroup v1 {', '.join(missing)} not mounted" if missing else "cgroup v1 not writable"
    if wanted == CGROUP.name:
        raise SandboxError(f"--tracking cgroup is not possible on this host: {why}")
    LOG.info(f"proctrack/cgroup is not possible here ({why}): tracking processes by pgid")
    return PGID
