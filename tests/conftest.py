"""Shared fixtures: the real Slurm sandbox, and helpers for waiting on it."""

from __future__ import annotations

import os
import random
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TypeVar

import pytest
from slurmpre import environment
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.sandbox.config import node_specs
from slurmpre.sandbox.instance import Instance, sandbox_env
from slurmpre.slurm import states
from slurmpre.slurm.client import CommandLineSlurm

DATA = Path(__file__).parent / "data"
# Slurm releases with captures in tests/data/slurm-<release>/ (tests/data/capture.py).
RELEASES = ("22.05", "24.11", "26.05")
T = TypeVar("T")

# -- input drawn at random ----------------------------------------------------------------
# A test whose input is drawn at random takes it from `seed` (an int) or `rng` (a
# random.Random on that seed): a fresh seed each run, or SLURMPRE_TEST_SEED's when set,
# printed before the test runs, so a failing test's output says how to draw the same
# input again (#49).
SEED_VARIABLE = "SLURMPRE_TEST_SEED"


def draw_seed(nodeid: str, env: Mapping[str, str] = os.environ) -> int:
    """The seed for the input of test ``nodeid``: ``SLURMPRE_TEST_SEED`` in ``env`` when
    set, else a fresh one. Printed with the command that draws the same input again."""
    given = env.get(SEED_VARIABLE, "").strip()
    if given:
        try:
            seed = int(given)
        except ValueError:
            raise pytest.UsageError(f"{SEED_VARIABLE}={given!r}: not an integer") from None
    else:
        seed = random.SystemRandom().randrange(2**32)
    rerun = f"{SEED_VARIABLE}={seed} .venv/bin/python -m pytest {shlex.quote(nodeid)}"
    print(f"seed {seed} (rerun with: {rerun})")
    return seed


@pytest.fixture
def seed(request: pytest.FixtureRequest) -> int:
    """This test's seed (see draw_seed); the test draws all its random input from it."""
    return draw_seed(request.node.nodeid)


@pytest.fixture
def rng(seed: int) -> random.Random:
    """A random.Random on this test's seed: use it for every value the test draws."""
    return random.Random(seed)


def worker_instance() -> Instance:
    """The sandbox this test process uses: one Slurm cluster per pytest-xdist worker (gw0
    the default sandbox, gw1 sandbox 1, ...), so the cluster's tests run side by side;
    $SLURMPRE_SANDBOX when it is set and no worker is named; else 0."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if worker.startswith("gw") and worker[2:].isdigit():
        return Instance(int(worker[2:]))
    given = os.environ.get(environment.SANDBOX, "")
    return Instance(int(given)) if given.isdigit() else Instance(0)


# Set before any test runs, so that every `slurmpre` command and job a test starts (they
# inherit it) reaches this worker's cluster.
INSTANCE = worker_instance()
os.environ[environment.SANDBOX] = str(INSTANCE.number)


def pytest_configure(config: pytest.Config) -> None:
    """`slurmpre submit` records each job in the user's own list: keep the tests' jobs
    out of the real one (subprocesses inherit this)."""
    import tempfile

    os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="slurmpre-test-state-")


@pytest.fixture(autouse=True)
def no_sandbox_reached(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test that does not use the cluster finds no sandbox up (`slurmpre.sandbox.reach`),
    whatever this machine runs: the Slurm commands it puts on PATH are the ones that run."""
    if request.node.get_closest_marker("sandbox") is None:
        monkeypatch.setenv(environment.SANDBOX_DIR, "/nonexistent/slurmpre-sandbox")
        return
    if "release" in request.fixturenames:
        return  # a release's own sandbox (tests/versions), which its fixture brings up
    # Every cluster test starts with the worker's sandbox up and its Slurm commands first
    # on PATH, whether it names a cluster fixture or builds its client itself, and whatever
    # a test before it did to this process's PATH. Without this, such tests ran the host's
    # scontrol ("munge.socket.2: No such file"), as CI found.
    box: Sandbox = request.getfixturevalue("sandbox")
    env = box.env
    for key in ("PATH", *sandbox_env(box.instance)):
        monkeypatch.setenv(key, env[key])


# Fixtures that stand for the running cluster: a test that uses one (itself or through
# another fixture) is a sandbox test, whatever file it sits in.
CLUSTER_FIXTURES = frozenset({"sandbox", "release"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses the cluster as `sandbox`: bin/test runs those apart from
    the others, which run beside them (and may not touch the cluster)."""
    for item in items:
        if CLUSTER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.sandbox)


def slurmpre_cli(
    *args: str,
    check: bool = False,
    timeout: float = 300,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the real ``python -m slurmpre`` (with ``env`` added to this environment) and
    return what it printed."""
    proc = subprocess.run(
        [sys.executable, "-m", "slurmpre", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=cwd,
        env=None if env is None else {**os.environ, **env},
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"slurmpre {' '.join(args)} exited {proc.returncode}\n"
            f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        )
    return proc


def wait_for(
    what: str,
    probe: Callable[[], T | None],
    timeout: float = 60,
    interval: float = 0.3,
    why: Callable[[], str] | None = None,
) -> T:
    """Poll ``probe`` until it returns something truthy; fail naming ``what`` (and what
    ``why`` says of the state then)."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    said = f"; {why()}" if why is not None else ""
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what} (last: {last!r}){said}")


def as_a_job(monkeypatch: pytest.MonkeyPatch, folder: Path, tag: str, attempt: int = 0) -> Path:
    """This process as the training of attempt ``attempt`` of job ``tag`` under slurmpre's
    wrapper, checkpointing into ``folder``: the environment the wrapper gives, and a
    fresh notice gate that looks at the notice file on every call. Returns the notice
    file, which the watcher writes on a drain."""
    from slurmpre import api
    from slurmpre.folder.layout import FolderLayout

    notice = FolderLayout(folder).notice(tag, attempt)
    for key, value in {
        "SLURMPRE_CHECKPOINT_DIR": str(folder),
        "SLURMPRE_JOB_TAG": tag,
        "SLURMPRE_RESTART_COUNT": str(attempt),
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("SLURMPRE_IN_PLACE", raising=False)
    api.watch_notices(str(notice), check_every=0.0)
    return notice


@pytest.fixture(params=RELEASES)
def captured(request: pytest.FixtureRequest) -> Path:
    """The folder of Slurm output captured on one release: a test using it runs on each."""
    folder = DATA / f"slurm-{request.param}"
    assert folder.is_dir(), f"no captures for Slurm {request.param}: run tests/data/capture.py"
    return folder


@pytest.fixture(scope="session")
def sandbox() -> Iterator[Sandbox]:
    """The real local Slurm cluster, brought up once per test session (as root)."""
    if os.geteuid() != 0:
        pytest.fail("the integration tests need root to run the Slurm sandbox")
    stock = os.environ.get("STOCK_OK") == "1"
    # SANDBOX_AS_IS=1: the sandbox that is up, whatever its shape (test_elastic's 2-4 scenes
    # run on `slurmpre sandbox up --nodes 5 --preemptible 4`); else the suite's own.
    if os.environ.get("SANDBOX_AS_IS") != "1":
        slurmpre_cli("sandbox", "up", *(["--stock-timings"] if stock else []), check=True)
    box = Sandbox.here()
    box.current()
    box.use()  # its Slurm commands (a root's, on the default 26.05) first on PATH
    # Every timeout in the integration tests assumes the tuned timings (a requeued job
    # can start about 6 s after its requeue); on stock timings each requeue costs
    # at least 121 s (cred_expire=120), which bench/drill.py --stock-timings measures.
    # STOCK_OK=1 runs tests that never requeue (the successor's) on a stock sandbox.
    if box.current().timings != "tuned" and not stock:
        pytest.fail(
            "the integration tests assume the sandbox's tuned timings: run it without "
            "--stock-timings (slurmpre sandbox down; slurmpre sandbox up)"
        )
    yield box


@pytest.fixture(scope="session")
def slurm(sandbox: Sandbox) -> CommandLineSlurm:
    return CommandLineSlurm()


@pytest.fixture
def shared_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder every sandbox node sees (they are all this host), with a hostile name."""
    base = tmp_path_factory.mktemp("shared")
    path = base / "dir with space; $(echo) 'q'"
    path.mkdir()
    return path


# The default sandbox's nodes, as named in this worker's cluster.
PREEMPTIBLE = [n.name for n in node_specs(3, 2, INSTANCE) if n.preemptible]
STANDARD = [n.name for n in node_specs(3, 2, INSTANCE) if not n.preemptible]


def wait_preemptible_idle(slurm: CommandLineSlurm) -> None:
    """Both preemptible nodes idle, and no job of an earlier test waiting to take them
    (one left pending would start between this check and the next submission)."""

    def ready() -> bool:
        waiting = [
            j for j in slurm.jobs()
            if j.state == states.PENDING
            and j.reason not in ("JobHeldUser", "JobHeldAdmin", "BeginTime")
        ]  # fmt: skip
        nodes = slurm.nodes(PREEMPTIBLE)
        return not waiting and all(n.state == "IDLE" and not n.flags for n in nodes)

    wait_for(
        "both preemptible nodes idle, and no job waiting for them",
        ready,
        timeout=180,
        why=lambda: f"nodes {slurm.nodes(PREEMPTIBLE)}; queue {slurm.jobs()}",
    )


def set_tracking(tracking: str) -> None:
    """Restart the sandbox with ``--tracking`` (auto, cgroup or pgid) unless it runs it already."""
    state = Sandbox.here().load()
    if state is not None and tracking != "auto" and state.tracking == tracking:
        return
    from slurmpre.sandbox.tracking import choose_tracking

    if state is not None and tracking == "auto" and state.tracking == choose_tracking("auto").name:
        return
    slurmpre_cli("sandbox", "down", check=True)
    slurmpre_cli("sandbox", "up", "--tracking", tracking, check=True)
