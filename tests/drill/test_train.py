"""The drill's pure-Python trainer (``--plain``): the bench runs it on Slurm releases
whose root has no torch, and compares its final weights with an uninterrupted run's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from slurmpre.drill.train import FINAL_PLAIN, LOG, plain_reference


def train(folder: Path, steps: int, restarts: int, **env: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "slurmpre.drill.train", "--plain", "--mode", "seeds"]
    argv += ["--steps", str(steps), "--every", "10", "--step-seconds", "0", "--save-seconds", "0"]
    argv += ["--checkpoint-dir", str(folder)]
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "WORLD_SIZE"))}
    environ.update(SLURM_RESTART_COUNT=str(restarts), **env)
    return subprocess.run(argv, env=environ, capture_output=True, text=True, timeout=120)


def test_a_resumed_plain_run_ends_with_the_uninterrupted_runs_bits(tmp_path: Path) -> None:
    first = train(tmp_path, 25, 0)
    assert first.returncode == 0, first.stderr
    assert sorted(p.name for p in tmp_path.glob("step-*")) == ["step-00000010", "step-00000020"]
    again = train(tmp_path, 40, 1)  # the seeds' way: from the highest step-N
    assert again.returncode == 0, again.stderr
    begins = [e for e in map(json.loads, (tmp_path / LOG).open()) if e["event"] == "begin"]
    assert [b["resumed_step"] for b in begins] == [0, 20]
    got = json.loads((tmp_path / FINAL_PLAIN).read_text())
    assert got == plain_reference(40)  # every float equal: JSON keeps a float's bits
    assert got != plain_reference(39)


def test_plain_refuses_a_second_process(tmp_path: Path) -> None:
    done = train(tmp_path, 5, 0, WORLD_SIZE="2")
    assert done.returncode != 0
    assert done.stderr.strip() == "--plain trains in one process: run it on one node, one task"
