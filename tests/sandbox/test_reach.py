"""slurmpre's own commands reach the sandbox that is up from the shell that brought it up
(`slurmpre.sandbox.reach`), on a fake state folder: never the machine's own."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurmpre import environment, procs
from slurmpre.cli import main
from slurmpre.errors import SandboxError, UsageError
from slurmpre.sandbox import instance, reach

ME = frozenset({os.geteuid()})
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="gives a file to another user")


@pytest.fixture
def slurmctld(tmp_path: Path) -> Iterator[int]:
    """A process that runs as a program named slurmctld (a copy of sleep)."""
    exe = tmp_path / "ctld" / "slurmctld"
    exe.parent.mkdir()
    shutil.copy("/bin/sleep", exe)
    proc = subprocess.Popen([str(exe), "600"])
    # Popen returns once exec has begun, and the new program's argv shows in
    # /proc/PID/cmdline a moment later: on a loaded host, `needed` could look between.
    for _ in range(1000):
        if procs.is_process_of(proc.pid, "slurmctld"):
            break
        time.sleep(0.01)
    yield proc.pid
    proc.kill()
    proc.wait()


def _script(path: Path, text: str) -> None:
    path.write_text(f"#!/bin/sh\n{text}\n")
    path.chmod(0o755)


def _sandbox(tmp_path: Path, pid: int, *, number: int = 0, root: bool = True) -> Path:
    """A sandbox as `up` leaves it (state folder, sandbox.json, a root's shims), under
    ``tmp_path``; its state folder. Each shim says on stdout that it ran, and with what."""
    roots = tmp_path / "roots"
    shims = roots / "sid-bin"
    shims.mkdir(parents=True)
    for name in ("sbatch", "squeue", "scontrol"):
        _script(shims / name, f'echo "shim {name} SLURM_CONF=$SLURM_CONF" >> {tmp_path}/ran')
    state = instance.Instance(number).state_dir
    state = tmp_path / "lib" / state.name
    state.mkdir(parents=True)
    record = {
        "version": [26, 5, 5],
        "timings": "tuned",
        "nodes": [],
        "slurmctld": pid,
        "root": str(roots / "sid") if root else None,
        "suite": "sid" if root else None,
        "instance": number,
    }
    (state / "sandbox.json").write_text(json.dumps(record))
    for path in (state, state / "sandbox.json", roots, shims):
        path.chmod(path.stat().st_mode & ~0o022)
    return state


def _host(tmp_path: Path) -> Path:
    """The host's Slurm commands, which reach no munge."""
    host = tmp_path / "host-bin"
    host.mkdir()
    for name in ("sbatch", "squeue", "scontrol"):
        _script(
            host / name,
            f'echo "host {name}" >> {tmp_path}/ran\n'
            'echo "Batch job submission failed: Protocol authentication error" >&2; exit 1',
        )
    return host


def _seen(box: Path, pid: int) -> str:
    """What `needed` found, for a failure's message."""
    return (
        f"slurmctld {pid}: alive {procs.alive(pid)}, argv {procs.cmdline(pid)}; "
        f"sandbox.json there: {(box / 'sandbox.json').exists()}"
    )


@pytest.fixture
def box(tmp_path: Path, slurmctld: int, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Sandbox 0 up, its state where the real one would be (`instance.STATE_ROOT`)."""
    state = _sandbox(tmp_path, slurmctld)
    monkeypatch.setattr(instance, "STATE_ROOT", state.parent)
    return state


def test_the_shell_that_brought_a_root_up_reaches_its_slurm(tmp_path: Path, box: Path) -> None:
    host = _host(tmp_path)
    shims = tmp_path / "roots" / "sid-bin"
    assert reach.needed({"PATH": f"{host}:/usr/bin"}, ME) == {"PATH": f"{shims}:{host}:/usr/bin"}
    # The sandbox's shims first already (an `export PATH=...`, a login shell): nothing.
    assert reach.needed({"PATH": f"{shims}:{host}"}, ME) == {}


def test_nothing_changes_when_no_sandbox_is_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(instance, "STATE_ROOT", tmp_path / "none")
    env = {"PATH": str(_host(tmp_path))}
    assert reach.needed(env, ME) == {}
    (tmp_path / "none" / "sandbox").mkdir(parents=True)  # a folder without sandbox.json
    assert reach.needed(env, ME) == {}
    assert reach.needed({**env, environment.SANDBOX: "9"}, ME) == {}


def test_nothing_changes_once_its_slurmctld_is_gone(tmp_path: Path, box: Path) -> None:
    record = json.loads((box / "sandbox.json").read_text())
    env = {"PATH": str(_host(tmp_path))}
    assert reach.needed(env, ME) != {}, _seen(box, record["slurmctld"])
    gone = subprocess.Popen(["true"])
    gone.wait()
    for pid in (gone.pid, os.getpid()):  # not running; running, but not a slurmctld
        (box / "sandbox.json").write_text(json.dumps({**record, "slurmctld": pid}))
        assert reach.needed(env, ME) == {}


def test_the_sandbox_named_gets_its_own_slurm_conf(
    tmp_path: Path, slurmctld: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = _sandbox(tmp_path, slurmctld, number=9, root=False)  # on the host's own Slurm
    monkeypatch.setattr(instance, "STATE_ROOT", state.parent)
    host = str(_host(tmp_path))
    conf = "/etc/slurm/sandbox9/slurm.conf"
    assert reach.needed({"PATH": host, environment.SANDBOX: "9"}, ME) == {"SLURM_CONF": conf}
    assert reach.needed({"PATH": host, environment.SANDBOX: "9", "SLURM_CONF": conf}, ME) == {}
    assert reach.needed({"PATH": host}, ME) == {}  # sandbox 0 is not up
    # Its state folder named instead of its number: the state says which sandbox it is.
    assert reach.needed({"PATH": host, environment.SANDBOX_DIR: str(state)}, ME) == {
        "SLURM_CONF": conf
    }


def test_sandbox_0_on_the_hosts_slurm_needs_nothing(
    tmp_path: Path, slurmctld: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = _sandbox(tmp_path, slurmctld, root=False)
    monkeypatch.setattr(instance, "STATE_ROOT", state.parent)
    assert reach.needed({"PATH": str(_host(tmp_path))}, ME) == {}


def test_a_slurm_conf_of_another_cluster_is_left_alone_unless_a_sandbox_is_named(
    tmp_path: Path, box: Path
) -> None:
    env = {"PATH": str(_host(tmp_path)), "SLURM_CONF": "/etc/real/slurm.conf"}
    assert reach.needed(env, ME) == {}
    named = reach.needed({**env, environment.SANDBOX: "0"}, ME)
    assert named["SLURM_CONF"] == "/etc/slurm/slurm.conf"
    assert named["PATH"].startswith(f"{tmp_path}/roots/sid-bin:")


def test_a_bad_sandbox_number_is_one_line(box: Path) -> None:
    with pytest.raises(UsageError, match=r"SLURMPRE_SANDBOX='x9': give a number from 0 to 9"):
        reach.needed({environment.SANDBOX: "x9"}, ME)


@needs_root
def test_a_state_file_of_another_user_is_not_followed(tmp_path: Path, box: Path) -> None:
    os.chown(box / "sandbox.json", 65534, -1)
    with pytest.raises(SandboxError, match=r"sandbox\.json: it is owned by .*uid 65534"):
        reach.needed({"PATH": str(_host(tmp_path))}, ME)


@pytest.mark.parametrize(
    "where", ["sandbox.json", ".", "../../roots/sid-bin", "../../roots/sid-bin/sbatch"]
)
@pytest.mark.parametrize("mode", [0o020, 0o002])
def test_what_a_group_or_everyone_may_write_is_not_followed(
    tmp_path: Path, box: Path, where: str, mode: int
) -> None:
    path = box / where
    path.chmod(path.stat().st_mode | mode)
    who = "its group" if mode == 0o020 else "everyone"
    with pytest.raises(SandboxError, match=f"not using .*: {who} may write it"):
        reach.needed({"PATH": str(_host(tmp_path))}, ME)


def test_links_and_odd_files_are_not_followed(tmp_path: Path, box: Path) -> None:
    env = {"PATH": str(_host(tmp_path))}
    (box / "sandbox.json").rename(box / "real.json")
    (box / "sandbox.json").symlink_to("real.json")
    with pytest.raises(SandboxError, match=r"sandbox\.json: it is a link$"):
        reach.needed(env, ME)
    (box / "sandbox.json").unlink()
    os.mkfifo(box / "sandbox.json", 0o600)  # opened without waiting for a writer
    with pytest.raises(SandboxError, match=r"sandbox\.json: it is not a regular file"):
        reach.needed(env, ME)
    (box / "sandbox.json").unlink()
    (box / "real.json").rename(box / "sandbox.json")
    shims = tmp_path / "roots" / "sid-bin"
    (shims / "sinfo").symlink_to("/bin/true")
    with pytest.raises(SandboxError, match=r"sid-bin/sinfo: it is not a regular file"):
        reach.needed(env, ME)
    (shims / "sinfo").unlink()
    shims.rename(tmp_path / "elsewhere")
    shims.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(SandboxError, match=r"sid-bin: it is a link or not a folder"):
        reach.needed(env, ME)


def test_a_state_that_is_not_one_changes_nothing(tmp_path: Path, box: Path) -> None:
    env = {"PATH": str(_host(tmp_path))}
    record = json.loads((box / "sandbox.json").read_text())
    for text in (
        "{",
        "[]",
        json.dumps({**record, "suite": "../../tmp"}),
        json.dumps({**record, "root": "rel"}),
    ):
        (box / "sandbox.json").write_text(text)
        assert reach.needed(env, ME) == {}


# -- the command line ------------------------------------------------------------
@pytest.fixture
def shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A shell with the host's Slurm first on PATH, sandbox 0 named by default."""
    host = _host(tmp_path)
    monkeypatch.setenv("PATH", f"{host}:{os.environ['PATH']}")
    monkeypatch.delenv(environment.SANDBOX, raising=False)
    monkeypatch.delenv(environment.SANDBOX_DIR, raising=False)
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.setattr(reach, "ROOT_ONLY", ME)
    return tmp_path / "ran"


def test_slurmpre_nodes_reaches_the_sandbox_the_shell_brought_up(
    shell: Path, box: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = dict(os.environ)
    assert main(["nodes", "--json"]) == 0, capsys.readouterr().err
    assert shell.read_text().splitlines()[0] == "shim scontrol SLURM_CONF="
    assert "host" not in shell.read_text()
    assert dict(os.environ) == before  # put back as it was once the command ends


def test_slurmpre_nodes_with_no_sandbox_up_runs_the_slurm_on_path(
    tmp_path: Path, shell: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(instance, "STATE_ROOT", tmp_path / "none")
    assert main(["nodes"]) == 1
    assert "Protocol authentication error" in capsys.readouterr().err
    assert shell.read_text() == "host scontrol\n"


def test_a_state_someone_else_could_write_is_said_and_not_followed(
    shell: Path, box: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (box / "sandbox.json").chmod(0o646)
    assert main(["nodes"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(
        f"slurmpre: warning: not using {box}/sandbox.json: everyone may write it (mode 646); "
        "running the Slurm on PATH\n"
    )
    assert shell.read_text() == "host scontrol\n"
