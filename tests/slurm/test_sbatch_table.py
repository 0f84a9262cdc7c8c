"""slurmpre's table of sbatch's options (slurmpre/login/sbatch_releases.py, read from each
release's source by tests/data/sbatch/extract.py) against the real sbatch of that release.

getopt_long answers without anything being submitted: ``sbatch --NAME`` with nothing on
stdin says "unrecognized option" for a name it lacks and "requires an argument" for one
that needs a value; ``sbatch --NAME=1`` says "doesn't allow an argument" for one that
takes none. (With no script on stdin and no ``--wrap`` value, sbatch stops there.) The
host's release is asked here; the others in tests/versions/test_contract.py.
"""

from __future__ import annotations

import subprocess

import pytest
from slurmpre.login.sbatch_releases import RELEASES
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.slurm.client import CommandLineSlurm
from slurmpre.slurm.parse import format_version


def kind_of(name: str) -> str | None:
    """What the sbatch on PATH makes of ``--NAME``: N, R, O, or None (not an option)."""

    def ask(word: str) -> str:
        proc = subprocess.run(
            ["sbatch", word],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        return proc.stdout + proc.stderr

    said = ask(f"--{name}")
    if "unrecognized option" in said:
        return None
    if "requires an argument" in said:
        return "R"
    return "N" if "allow an argument" in ask(f"--{name}=1") else "O"


def check_table(release: str) -> None:
    table = RELEASES[release]
    wrong = {}
    for name, kind in sorted(table.items()):
        if name in ("help", "usage", "version"):
            continue  # they print and exit before getopt would complain
        found = kind_of(name)
        if found != kind:
            wrong[name] = (kind, found)
    assert not wrong, f"sbatch {release} disagrees with slurmpre's table: {wrong}"
    assert kind_of("surely-no-such-option") is None


@pytest.mark.sandbox
def test_the_hosts_sbatch_takes_every_option_as_the_table_says(sandbox: Sandbox) -> None:
    release = ".".join(format_version(CommandLineSlurm().version()).split(".")[:2])
    check_table(release)
