"""What slurmpre knows of sbatch's options (slurmpre/login/sbatch_options.py: the names
it refuses in extra_sbatch, and the short options) against the real sbatch of a release.

getopt_long answers without anything being submitted: ``sbatch --NAME`` with nothing on
stdin says "unrecognized option" for a name it lacks; ``sbatch -X`` says "invalid option"
for a letter it lacks and "requires an argument" for one that takes a value. (With no
script on stdin and no ``--wrap`` value, sbatch stops there.) The host's release is asked
here; the others in tests/versions/test_contract.py.
"""

from __future__ import annotations

import subprocess

import pytest
from slurmpre.login.sbatch_options import ALIASES, MANAGED, NOT_FOR_A_SCRIPT, SHORT, SHORT_FLAGS
from slurmpre.sandbox.cluster import Sandbox


def said(word: str) -> str:
    """What the sbatch on PATH says to ``word`` alone."""
    proc = subprocess.run(
        ["sbatch", word],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return proc.stdout + proc.stderr


def check_table(release: str) -> None:
    """Every name slurmpre refuses is an option of this sbatch (so its prefixes are read
    as it), and every short option is the letter, with or without a value, it expects."""
    wrong: dict[str, str] = {}
    for name in sorted({*MANAGED, *ALIASES, *NOT_FOR_A_SCRIPT} - {"help", "usage", "version"}):
        if "unrecognized option" in said(f"--{name}"):
            wrong[f"--{name}"] = "unrecognized"
    for letter in sorted(SHORT):
        if letter in "hV":
            continue  # they print and exit before getopt would complain
        answer = said(f"-{letter}")
        takes = letter not in SHORT_FLAGS and letter != "k"
        if "invalid option" in answer or ("requires an argument" in answer) != takes:
            wrong[f"-{letter}"] = answer.strip().splitlines()[0] if answer.strip() else ""
    assert not wrong, f"sbatch {release} disagrees with slurmpre: {wrong}"
    assert "unrecognized option" in said("--surely-no-such-option")


@pytest.mark.sandbox
def test_the_hosts_sbatch_takes_every_option_as_slurmpre_expects(sandbox: Sandbox) -> None:
    from slurmpre.slurm.client import CommandLineSlurm
    from slurmpre.slurm.parse import format_version

    release = ".".join(format_version(CommandLineSlurm().version()).split(".")[:2])
    check_table(release)
