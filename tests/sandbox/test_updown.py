"""`down` stops exactly what `up` started, jobs included; `up` brings it all back.

Kept in its own module: it takes the shared sandbox down and up again.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from slurmpre import procs
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.sandbox.sharing import others_up
from slurmpre.slurm.client import CommandLineSlurm

from tests.conftest import slurmpre_cli, wait_for

pytestmark = pytest.mark.sandbox


def test_down_leaves_nothing_behind_and_up_restores(
    sandbox: Sandbox, slurm: CommandLineSlurm, shared_tmp: Path
) -> None:
    marker = shared_tmp / "started"
    # A job whose task ignores SIGTERM, the hardest kind to leave nothing of.
    script = (
        "#!/bin/bash\n"
        f"export MARKER={shlex.quote(str(marker))}\n"
        'srun bash -c \'trap "" TERM; touch "$MARKER"; sleep 600\'\n'
    )
    slurm.submit(script, args=["--nodes=2", f"--output={shared_tmp}/out-%j.txt"])
    wait_for("the job's tasks", marker.exists)
    state = sandbox.load()
    assert state is not None
    ours = [state.slurmctld, *(n["pid"] for n in state.nodes)]
    if state.munged and not others_up(sandbox.state_dir):  # else handed over, and lives on
        ours.append(state.munged)
    steps = procs.holders_of_sockets_under(sandbox.state_dir / "spool")
    tasks = procs.descendants(steps)
    assert steps and tasks

    proc = slurmpre_cli("sandbox", "down", check=True)
    assert proc.stdout.strip() == "sandbox down"
    left = [p for p in [*ours, *steps, *tasks] if p and procs.alive(p)]
    assert left == []
    assert sandbox.load() is None
    assert slurmpre_cli("sandbox", "status").returncode == 1
    assert slurmpre_cli("sandbox", "down", check=True).stdout.strip() == "sandbox is not up"

    slurmpre_cli("sandbox", "up", check=True)
    assert sandbox.daemons_alive(sandbox.load())  # type: ignore[arg-type]
