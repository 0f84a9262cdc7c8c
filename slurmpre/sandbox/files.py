"""The files of a fresh sandbox: clean state, spool and log folders, stand-in GPUs,
and the configuration (slurm.conf, gres.conf, cgroup.conf) marked as the sandbox's."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from slurmpre.atomic import write_atomic
from slurmpre.errors import SandboxError
from slurmpre.sandbox.config import (
    MARKER,
    SandboxConfig,
    render_cgroup_conf,
    render_gres_conf,
    render_slurm_conf,
    render_task_prolog,
)
from slurmpre.sandbox.host import remove_managed
from slurmpre.sandbox.tracking import clean_cgroups


def refuse_foreign_config(etc: Path) -> None:
    """Never replace a slurm.conf the sandbox did not write (a real cluster's)."""
    conf = etc / "slurm.conf"
    if conf.exists() and MARKER not in conf.read_text(errors="replace"):
        raise SandboxError(
            f"{conf} exists and was not written by the sandbox; "
            "refusing to replace a real cluster's configuration"
        )


def lay_out(cfg: SandboxConfig, state_dir: Path, etc: Path) -> None:
    """A clean cluster: fresh state, spool and logs, then the config files."""
    # Job ids start again at 1 on a fresh state: a job's cgroups left by a killed
    # slurmstepd would make the new job of that id fail to start (cpuset busy).
    clean_cgroups([n.name for n in cfg.nodes])
    for sub in ("state", "spool", "run", "dev", "local"):
        shutil.rmtree(state_dir / sub, ignore_errors=True)
        (state_dir / sub).mkdir(parents=True)
    cfg.log_dir.mkdir(parents=True, exist_ok=True)
    for old in cfg.log_dir.iterdir():
        old.unlink()
    shutil.rmtree(cfg.local_root, ignore_errors=True)
    cfg.local_root.mkdir(mode=0o755)
    for node in cfg.nodes:
        cfg.spool_dir(node.name).mkdir(parents=True)
        for dev in cfg.gpu_files(node.name):
            # Stand-in GPUs: the device numbers of /dev/null (1, 3).
            os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        # The node's own folder, fresh as a new node's disk; any job user writes there.
        cfg.local_dir(node.name).mkdir()
        cfg.local_dir(node.name).chmod(0o1777)
    write_atomic(cfg.task_prolog, render_task_prolog(cfg), mode=0o755)
    etc.mkdir(parents=True, exist_ok=True)
    write_atomic(etc / "slurm.conf", render_slurm_conf(cfg))
    write_atomic(etc / "gres.conf", render_gres_conf(cfg))
    cgroup = render_cgroup_conf(cfg)
    if cgroup is not None:
        write_atomic(etc / "cgroup.conf", cgroup)
    else:
        remove_managed(etc / "cgroup.conf")
