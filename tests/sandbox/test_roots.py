"""A Slurm other than the host's, from a Debian root: the parts that need no root made."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from slurmpre.errors import SandboxError, UsageError
from slurmpre.lines import sent_to
from slurmpre.sandbox import roots
from slurmpre.sandbox.roots import Root, suite_of

from tests.conftest import slurmpre_cli


def test_each_release_has_its_debian_suite() -> None:
    assert [suite_of(v) for v in ("22.05", "24.11", "26.05")] == ["bookworm", "trixie", "sid"]
    with pytest.raises(UsageError, match=r"--slurm '23.02' is not one of 22.05, 24.11, 26.05"):
        suite_of("23.02")


def test_an_unknown_release_is_one_line_and_exit_2() -> None:
    proc = slurmpre_cli("sandbox", "up", "--slurm", "25.05")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "slurmpre: error: --slurm '25.05' is not one of 22.05, 24.11, 26.05"
    ]


def test_fetch_checks_every_release_before_any_work() -> None:
    proc = slurmpre_cli("sandbox", "fetch", "--slurm", "24.11", "--slurm", "23.02")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "slurmpre: error: --slurm '23.02' is not one of 22.05, 24.11, 26.05"
    ]
    assert proc.stdout == ""  # 24.11 was not started on


def test_two_makers_of_one_root_make_it_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sandbox fetch` in the background while a test's `up --slurm` needs the same root:
    the second waits for the first and reuses its root (a second debootstrap would delete
    the first one's half-made root under it)."""
    made: list[str] = []
    inside, waiting = threading.Event(), threading.Event()

    def bootstrap(self: Root) -> None:
        made.append(self.suite)
        inside.set()
        waiting.wait(30)  # the other maker has come, and waits
        self.path.mkdir(parents=True)
        (self.path / roots.READY).write_text(self.suite)

    monkeypatch.setattr(Root, "_bootstrap", bootstrap)
    monkeypatch.setattr(Root, "_install_slurmpre", lambda self: None)
    monkeypatch.setattr(Root, "_write_shims", lambda self: None)
    monkeypatch.setattr(Root, "_add_later", lambda self: None)
    root = Root("trixie", tmp_path / "trixie")
    first = threading.Thread(target=root.ensure)
    first.start()
    assert inside.wait(30)
    said: list[str] = []

    def say(message: str) -> None:
        said.append(message)
        waiting.set()

    with sent_to(say, roots.__name__):
        root.ensure()
    first.join(30)
    assert made == ["trixie"]
    assert said == ["waiting for the Debian trixie root another process is making"]


def test_shared_folders_are_bound_once_each(tmp_path: Path) -> None:
    root = Root("trixie", tmp_path / "trixie")
    binds = root.binds(Path("/var/lib/slurmpre/sandbox"))
    assert binds[:3] == [Path("/tmp"), Path("/home"), Path("/var/lib/slurmpre")]
    assert roots.source_dir() in binds or any(roots.source_dir().is_relative_to(b) for b in binds)
    assert len(binds) == len(set(binds))


def test_the_host_interpreter_is_carried_into_a_root_unless_it_is_the_systems(
    tmp_path: Path,
) -> None:
    """A venv and the Python it was made from are bound at their own paths (so a spec's
    `python` means the same inside), never a Python under /usr, which is the root's own."""
    venv, base = tmp_path / "venv", tmp_path / "pyenv" / "3.11"
    assert roots.interpreter((str(venv), str(base))) == [venv, base]
    assert roots.interpreter(("/usr", "/usr")) == []
    assert roots.interpreter(("/usr/local", "/")) == []
    assert roots.interpreter((str(venv), str(venv))) == [venv]
    binds = Root("sid", tmp_path / "sid").binds(Path("/var/lib/slurmpre/sandbox"))
    assert all(p in binds or any(p.is_relative_to(b) for b in binds) for p in roots.interpreter())


def test_slurm_path_puts_one_roots_commands_first_and_none_takes_them_away() -> None:
    trixie = Root("trixie", roots.ROOTS_DIR / "trixie")
    sid = Root("sid", roots.ROOTS_DIR / "sid")
    path = roots.slurm_path(roots.slurm_path("/usr/local/bin:/usr/bin", trixie), sid)
    # the other root's commands leave PATH
    assert path.split(os.pathsep) == [str(sid.shims), "/usr/local/bin", "/usr/bin"]
    assert roots.slurm_path(path, None) == "/usr/local/bin:/usr/bin"


def test_loading_a_sandbox_on_a_root_leaves_the_process_path_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Reading the state is no reason to change what every later command of this
    process finds on PATH: only `use()` does, and the sandbox's own commands get the
    root's Slurm through their environment."""
    import json

    from slurmpre.sandbox.cluster import Sandbox

    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin")
    sid = Root("sid", roots.ROOTS_DIR / "sid")
    state = {"version": [26, 5, 5], "timings": "tuned", "nodes": [], "root": str(sid.path),
             "suite": "sid"}  # fmt: skip
    (tmp_path / "sandbox.json").write_text(json.dumps(state))
    box = Sandbox(tmp_path)
    assert box.load() is not None
    assert os.environ["PATH"] == "/usr/local/bin:/usr/bin"
    assert box.client.env is not None
    assert box.client.env["PATH"].split(os.pathsep)[0] == str(sid.shims)
    box.use()
    assert os.environ["PATH"].split(os.pathsep) == [str(sid.shims), "/usr/local/bin", "/usr/bin"]


def test_stale_job_cgroups_of_the_sandboxs_nodes_are_removed_deepest_first(tmp_path: Path) -> None:
    """A fresh sandbox numbers jobs from 1 again; a job_1 cgroup left by a killed
    slurmstepd made the new job 1 fail to start (cpuset.cpus: Device or resource busy)."""
    from slurmpre.sandbox.tracking import clean_cgroups

    for ctrl in ("cpuset", "freezer"):
        (tmp_path / ctrl / "slurm_gpu-dp-1" / "uid_0" / "job_1" / "step_batch").mkdir(parents=True)
        (tmp_path / ctrl / "slurm_other-host" / "uid_0").mkdir(parents=True)
    removed = clean_cgroups(["gpu-dp-1"], root=tmp_path)
    assert len(removed) == 2 * 4
    assert not (tmp_path / "cpuset" / "slurm_gpu-dp-1").exists()
    assert (tmp_path / "cpuset" / "slurm_other-host" / "uid_0").is_dir()


def test_a_python_the_sandboxs_root_does_not_see_is_refused_in_one_line(tmp_path: Path) -> None:
    """A root (a folder here) whose shims are first on PATH: a venv under a bound folder is
    seen, another checkout's is not; a venv whose link points to an interpreter the root
    lacks is not either (the link is followed inside the root, not on the host)."""
    from slurmpre.sandbox.seen import unseen

    roots = tmp_path / "roots"
    root = roots / "sid"
    shims = roots / "sid-bin"
    shims.mkdir(parents=True)
    (shims / "sbatch").write_text("#!/bin/sh\n")
    seen = root / "home" / "u" / "venv" / "bin"
    seen.mkdir(parents=True)
    (seen / "python3").symlink_to("/opt/py/bin/python3.11")  # absolute: the root's /opt
    (root / "opt" / "py" / "bin").mkdir(parents=True)
    (root / "opt" / "py" / "bin" / "python3.11").write_text("")
    (seen / "python").symlink_to("python3")
    (seen / "broken").symlink_to("/usr/bin/python3.11")  # the host has it, the root not
    path = f"{shims}:/usr/bin"
    assert unseen("/home/u/venv/bin/python", path, roots) is None
    why = unseen("/work/other/.venv/bin/python", path, roots)
    assert why is not None and len(why.splitlines()) == 1
    assert why.startswith("python = '/work/other/.venv/bin/python' is not inside the sandbox's")
    assert unseen("/home/u/venv/bin/broken", path, roots) is not None
    # The host's Slurm first on PATH (or no Slurm at all): nothing to say.
    host = tmp_path / "host-bin"
    host.mkdir()
    (host / "sbatch").write_text("#!/bin/sh\n")
    assert unseen("/work/other/.venv/bin/python", f"{host}:{shims}", roots) is None
    assert unseen("/work/other/.venv/bin/python", "", roots) is None


def test_a_root_whose_slurmd_is_a_debian_alternative_is_made(tmp_path: Path) -> None:
    """sid's slurmd is ``/usr/sbin/slurmd -> /etc/alternatives/slurmd -> slurmd-wlm``:
    absolute links that name paths of the root. Looked up on the host, where no Slurm is
    installed yet (a fresh machine), they lead nowhere and the root was refused."""
    work = tmp_path / "sid.incoming"
    (work / "usr/sbin").mkdir(parents=True)
    (work / "etc/alternatives").mkdir(parents=True)
    (work / "usr/sbin/slurmd-wlm").write_text("")
    (work / "usr/sbin/slurmd").symlink_to("/etc/alternatives/slurmd")
    (work / "etc/alternatives/slurmd").symlink_to("/usr/sbin/slurmd-wlm")
    root = Root("sid", tmp_path / "sid")
    root._check_made(work)  # no error
    (work / "usr/sbin/slurmd-wlm").unlink()
    with pytest.raises(SandboxError, match="the Debian sid root has no slurmd"):
        root._check_made(work)


def test_a_path_folder_that_cannot_be_looked_into_is_passed_over(tmp_path: Path) -> None:
    """PATH may name folders this user cannot search (another user's ~/.cargo/bin: EACCES)
    or names the system refuses (ENAMETOOLONG): `submit` exited 3 on them with a traceback
    line (seen on 22.05, whose PATH has no root's shims first)."""
    from slurmpre.sandbox.seen import unseen

    roots = tmp_path / "roots"
    shims = roots / "sid-bin"
    shims.mkdir(parents=True)
    (shims / "sbatch").write_text("#!/bin/sh\n")
    odd = "/" + "x" * 5000
    assert unseen("/usr/bin/python3", odd, roots) is None
    why = unseen("/work/other/.venv/bin/python", f"{odd}:{shims}", roots)
    assert why is not None and "is not inside the sandbox's" in why
