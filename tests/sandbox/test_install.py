"""Refusals that need no cluster: not root, and no way to install Slurm."""

from __future__ import annotations

from pathlib import Path

import pytest
from slurmpre.errors import SandboxError
from slurmpre.sandbox import cluster, host


def test_not_root_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host.os, "geteuid", lambda: 1000)
    with pytest.raises(SandboxError, match="must be run as root"):
        cluster.Sandbox(Path("/nonexistent")).up()


def test_unreachable_apt_is_one_clear_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Pretend Slurm is missing, and put an apt-get that fails as an offline one does.
    monkeypatch.setattr(host, "EXECUTABLES", {"slurmctld": str(tmp_path / "missing")})
    fake = tmp_path / "bin" / "apt-get"
    fake.parent.mkdir()
    fake.write_text(
        "#!/bin/sh\n"
        "echo 'W: Failed to fetch http://deb.example/dists/InRelease  "
        "Temporary failure resolving deb.example' >&2\n"
        "echo 'E: Unable to locate package slurmctld' >&2\nexit 100\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:/usr/bin:/bin")
    with pytest.raises(SandboxError) as info:
        host.ensure_installed()
    assert str(info.value) == (
        "could not install Slurm with apt-get: E: Unable to locate package slurmctld"
    )
