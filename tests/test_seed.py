"""The suite's one way to draw a test's input at random (#49): a seed that is printed
first, and that SLURMPRE_TEST_SEED gives back."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SEED_VARIABLE, draw_seed

ROOT = Path(__file__).parents[1]


def test_the_variable_gives_the_seed_and_so_the_same_draws(
    capsys: pytest.CaptureFixture[str],
) -> None:
    env = {SEED_VARIABLE: "1234"}
    first = random.Random(draw_seed("tests/a.py::test_b[x y]", env))
    again = random.Random(draw_seed("tests/a.py::test_b[x y]", env))
    assert [first.random() for _ in range(5)] == [again.random() for _ in range(5)]
    assert first.randbytes(16) == again.randbytes(16)
    shown = capsys.readouterr().out.splitlines()
    line = (
        "seed 1234 (rerun with: SLURMPRE_TEST_SEED=1234 .venv/bin/python -m pytest "
        "'tests/a.py::test_b[x y]')"
    )
    assert shown == [line, line]


def test_without_the_variable_each_draw_has_a_fresh_seed_and_prints_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    seeds = [draw_seed("t.py::t", {}) for _ in range(5)]
    assert len(set(seeds)) > 1  # five equal draws of 2**32: once in 10**38
    shown = capsys.readouterr().out.splitlines()
    assert shown == [
        f"seed {s} (rerun with: {SEED_VARIABLE}={s} .venv/bin/python -m pytest t.py::t)"
        for s in seeds
    ]


@pytest.mark.parametrize("given", ["", "  "])
def test_an_empty_variable_is_unset(given: str, capsys: pytest.CaptureFixture[str]) -> None:
    seed = draw_seed("t.py::t", {SEED_VARIABLE: given})
    assert capsys.readouterr().out.startswith(f"seed {seed} ")


def test_a_variable_that_is_no_integer_is_refused() -> None:
    with pytest.raises(pytest.UsageError, match=r"SLURMPRE_TEST_SEED='x1': not an integer"):
        draw_seed("t.py::t", {SEED_VARIABLE: "x1"})


DRAWING = """
import random


def test_draws(rng: random.Random) -> None:
    print("drew", rng.randbytes(8).hex())
    raise AssertionError("failed on purpose")
"""


def run_failing(folder: Path, seed: str | None) -> tuple[int, str]:
    """pytest, as a user runs it, on a test that draws from ``rng`` and fails; the seed and
    what it drew, as the failure report shows them."""
    env = {k: v for k, v in os.environ.items() if k != SEED_VARIABLE}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    if seed is not None:
        env[SEED_VARIABLE] = seed
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "test_draws.py"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    shown = re.search(r"^seed (\d+) \(rerun with: (.*)\)$", proc.stdout, re.MULTILINE)
    drew = re.search(r"^drew ([0-9a-f]{16})$", proc.stdout, re.MULTILINE)
    assert shown and drew, proc.stdout
    assert shown[2] == (
        f"{SEED_VARIABLE}={shown[1]} .venv/bin/python -m pytest test_draws.py::test_draws"
    )
    return int(shown[1]), drew[1]


def test_a_failing_test_shows_its_seed_and_the_seed_draws_its_input_again(
    tmp_path: Path,
) -> None:
    (tmp_path / "conftest.py").write_text("from tests.conftest import rng, seed  # noqa: F401\n")
    (tmp_path / "test_draws.py").write_text(DRAWING)
    seed, drew = run_failing(tmp_path, None)
    assert drew == random.Random(seed).randbytes(8).hex()
    assert run_failing(tmp_path, str(seed)) == (seed, drew)
