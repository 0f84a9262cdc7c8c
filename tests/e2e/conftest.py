"""The uninterrupted run every end-to-end result is compared with, trained once per session."""

from __future__ import annotations

from typing import Any

import pytest
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.slurm.client import CommandLineSlurm

from tests.e2e.helpers import final_weights, progress, submit, wait_done


@pytest.fixture(scope="session")
def baseline(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Any:
    pytest.importorskip("torch", reason="the e2e extra (torch==2.13.0) is not installed")
    folder = tmp_path_factory.mktemp("baseline")
    slurm = CommandLineSlurm()
    job_id = submit(folder, nodes="2")
    wait_done(slurm, job_id, folder)
    assert [p["attempt"] for p in progress(folder)] == [0]
    return final_weights(folder)
