"""The contract on every supported Slurm release other than the default (26.05, the
provider's, which runs the whole suite): 22.05 (the host's packages on Debian 12) and
24.11 (a Debian 13 root), `sandbox up --slurm`.

On each: the client reads the cluster, a spec renders and submits, the wrapper
starts, and a drained node makes the job checkpoint just in time, requeue itself
and resume on the other node with zero steps lost. The default sandbox is put
back after the last release, for the tests that follow.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from slurmpre import procs
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.sandbox.host import host_suite
from slurmpre.sandbox.preempt import PreemptPlan
from slurmpre.sandbox.roots import DEFAULT_RELEASE, PROFILE, SUITES, Root, mounts_under
from slurmpre.sandbox.sharing import others_up
from slurmpre.slurm.client import CommandLineSlurm
from slurmpre.slurm.parse import JobInfo, format_version

from tests.conftest import PREEMPTIBLE, STANDARD, slurmpre_cli, wait_for, wait_preemptible_idle
from tests.e2e.helpers import (
    final_weights,
    preempt_until_done,
    progress,
    same_weights,
    step_reached,
    wait_done,
)
from tests.e2e.helpers import submit as submit_tiny
from tests.slurm.test_sbatch_table import check_table

pytestmark = pytest.mark.sandbox

# The default release runs the whole suite (tests/e2e, tests/test_submit.py, ...):
# these run the contract on every other supported release.
RELEASES = [release for release in SUITES if release != DEFAULT_RELEASE]
STEPS = 40

# The training: a step every 0.3 s, a checkpoint on the notice (state: the next step).
TRAIN = """\
import json, os, time
from pathlib import Path
import slurmpre

folder = Path(os.environ["SLURMPRE_CHECKPOINT_DIR"])
start = 0
if (path := slurmpre.resume_path()) is not None:
    start = json.loads((path / "state.json").read_text())["next"]
attempt = int(os.environ.get("SLURM_RESTART_COUNT", "0"))
in_place = int(os.environ.get("SLURMPRE_IN_PLACE") or 0)
if os.environ.get("SLURM_PROCID", "0") != "0":
    # A second node holds no state: it waits for the notice, and is let go.
    while not slurmpre.preemption_requested():
        time.sleep(0.3)
    raise SystemExit(0)
os.environ.update(RANK="0", WORLD_SIZE="1")  # the one rank that checkpoints
with open(folder / "steps.jsonl", "a") as log:
    for step in range(start, {steps}):
        if slurmpre.preemption_requested():
            with slurmpre.checkpoint(step) as path:
                (path / "state.json").write_text(json.dumps({{"next": step}}))
            break
        time.sleep(0.3)
        log.write(json.dumps({{"step": step, "attempt": attempt, "in_place": in_place}}) + "\\n")
        log.flush()
"""


@pytest.fixture(scope="module")
def host_back() -> Iterator[None]:
    """After every release here: the default sandbox, up again, for the tests that follow
    (once, not between releases)."""
    path = os.environ["PATH"]
    yield
    os.environ["PATH"] = path  # the default sandbox's Slurm commands again
    slurmpre_cli("sandbox", "down", check=True)
    slurmpre_cli("sandbox", "up", check=True)


@pytest.fixture(scope="module", params=RELEASES)
def release(request: pytest.FixtureRequest, host_back: None) -> Iterator[str]:
    """That release's sandbox, up; down afterwards."""
    wanted: str = request.param
    if os.geteuid() != 0:
        pytest.fail("the contract tests need root to run the Slurm sandbox")
    path = os.environ["PATH"]
    slurmpre_cli("sandbox", "down", check=True)
    slurmpre_cli("sandbox", "up", "--slurm", wanted, check=True, timeout=1800)
    try:
        yield wanted
    finally:
        os.environ["PATH"] = path
        slurmpre_cli("sandbox", "down", check=True)


@pytest.fixture
def box(release: str) -> Sandbox:
    box = Sandbox.here()
    box.current()
    box.use()  # the root's Slurm commands first on PATH, here and in what we start
    return box


def python_for(box: Sandbox) -> str:
    """The interpreter the job's nodes run: the root's, or this one on the host's Slurm."""
    return str(Root.python(box.state_dir)) if box.root is not None else sys.executable


def test_the_sandbox_runs_that_release(release: str, box: Sandbox) -> None:
    slurm = CommandLineSlurm()
    assert format_version(slurm.version()).startswith(release)
    assert (box.root.suite if box.root is not None else host_suite()) == SUITES[release]
    nodes = {n.name: n for n in slurm.nodes()}
    assert set(nodes) == {*PREEMPTIBLE, *STANDARD}
    assert all(nodes[n].features == ("preemptible",) for n in PREEMPTIBLE)
    assert nodes[STANDARD[0]].features == ("standard",)
    assert all(n.usable for n in nodes.values())


def test_that_releases_sbatch_takes_every_option_as_slurmpre_expects(
    release: str, box: Sandbox
) -> None:
    """The names slurmpre refuses in extra_sbatch, and the short options: ask the real
    sbatch (tests/slurm/test_sbatch_table.py says how; nothing is submitted)."""
    check_table(release)


def submit(
    box: Sandbox, folder: Path, release: str, nodes: str, lines: tuple[str, ...] = ()
) -> str:
    folder.mkdir()
    (folder / "train.py").write_text(TRAIN.format(steps=STEPS))
    spec = folder / "job.toml"
    spec.write_text(
        "\n".join(
            [
                f'name = "contract-{release}"',
                f"command = {json.dumps(['python3', str(folder / 'train.py')])}",
                'launcher = "plain"',
                f'nodes = "{nodes}"',
                f"python = {json.dumps(python_for(box))}",
                f"checkpoint_dir = {json.dumps(str(folder / 'ckpt'))}",
                "poll_interval = 1",
                *lines,
            ]
        )
        + "\n"
    )
    return slurmpre_cli("submit", str(spec), check=True, cwd=folder).stdout.strip()


def drain_until_done(
    slurm: CommandLineSlurm, job_id: str, ckpt: Path, choose: Callable[[JobInfo], str]
) -> tuple[JobInfo, str]:
    """After a few steps, drain the node ``choose`` picks the provider's way, and wait for
    the job to complete; the node is put back and the job ended whatever happens."""
    victim = None
    try:
        steps = ckpt / "steps.jsonl"
        wait_for(
            "a few steps of the first attempt",
            lambda: steps.exists() and steps.read_text().count("\n") >= 5,
            timeout=120,
        )
        victim = choose(slurm.job(job_id))
        slurm.update_node(victim, state="DRAIN", reason="preempted")
        wait_for(
            f"job {job_id} to finish after the drain",
            lambda: (j := slurm.job(job_id)).finished and j,
            timeout=180,
        )
        job = slurm.job(job_id)
        assert job.state == "COMPLETED", logs(ckpt)[-4000:]
        return job, victim
    finally:
        if victim is not None:
            slurm.update_node(victim, state="RESUME")
        if not slurm.job(job_id).finished:
            slurm.cancel(job_id)


def logs(ckpt: Path) -> str:
    return "\n".join(p.read_text() for p in sorted((ckpt / "logs").glob("*.out")))


def only_node(job: JobInfo) -> str:
    (node,) = job.nodes
    return node


def test_drain_checkpoint_requeue_resume_loses_no_step(
    release: str, box: Sandbox, tmp_path: Path
) -> None:
    slurm = CommandLineSlurm()
    folder = tmp_path / f"contract {release}"
    ckpt = folder / "ckpt"
    job_id = submit(box, folder, release, "1", ('restart = "requeue"',))
    job, victim = drain_until_done(slurm, job_id, ckpt, only_node)
    assert job.restarts == 1
    assert job.nodes != (victim,)  # it resumed on the other preemptible node
    done = [json.loads(line) for line in (ckpt / "steps.jsonl").read_text().splitlines()]
    assert [d["step"] for d in done] == list(range(STEPS))  # each step once: none lost
    assert {d["attempt"] for d in done} == {0, 1}
    records = [json.loads(line) for line in (ckpt / ".slurmpre" / "attempts.jsonl").open()]
    kinds = [r.get("event") for r in records]
    assert kinds.count("notice") == 1 and kinds.count("requeued") == 1, (kinds, logs(ckpt)[-3000:])
    # The requeue followed the checkpoint taken on the notice, not the deadline.
    assert kinds.index("notice") < kinds.index("checkpoint") < kinds.index("requeued"), kinds


def not_the_batch_host(job: JobInfo) -> str:
    assert len(job.nodes) == 2, job.nodes
    return next(n for n in job.nodes if n != job.batch_host)


def test_a_drained_second_node_is_released_and_training_goes_on_in_place(
    release: str, box: Sandbox, tmp_path: Path
) -> None:
    """The in-place restart on this release: `scontrol update JobId=… NodeList=…` releases
    the drained node, its resize script is read, and the next step runs on the batch host."""
    slurm = CommandLineSlurm()
    wait_preemptible_idle(slurm)
    folder = tmp_path / f"in place {release}"
    ckpt = folder / "ckpt"
    job_id = submit(box, folder, release, "1-2")
    job, victim = drain_until_done(slurm, job_id, ckpt, not_the_batch_host)
    assert job.restarts == 0
    assert job.nodes == (job.batch_host,)
    done = [json.loads(line) for line in (ckpt / "steps.jsonl").read_text().splitlines()]
    assert [d["step"] for d in done] == list(range(STEPS))  # each step once: none lost
    assert {(d["attempt"], d["in_place"]) for d in done} == {(0, 0), (0, 1)}
    records = [json.loads(line) for line in (ckpt / ".slurmpre" / "attempts.jsonl").open()]
    released = [r for r in records if r.get("event") == "in_place"]
    assert [r["released"] for r in released] == [[victim]], records
    assert not any(r.get("event") == "requeued" for r in records)


def test_a_drained_one_node_job_hands_over_to_a_successor(
    release: str, box: Sandbox, tmp_path: Path
) -> None:
    """restart = "successor" on this release: Requeue=0 and sbatch from inside the job,
    --exclude of the draining node, and the new job waits for the old one to end."""
    slurm = CommandLineSlurm()
    wait_preemptible_idle(slurm)
    folder = tmp_path / f"successor {release}"
    ckpt = folder / "ckpt"
    job_id = submit(box, folder, release, "1", ('restart = "successor"',))
    victim, successor = None, None
    try:
        steps = ckpt / "steps.jsonl"
        wait_for(
            "a few steps",
            lambda: steps.exists() and steps.read_text().count("\n") >= 5,
            timeout=120,
        )
        victim = only_node(slurm.job(job_id))
        slurm.update_node(victim, state="DRAIN", reason="preempted")

        def handed() -> str | None:
            for line in (ckpt / ".slurmpre" / "attempts.jsonl").open():
                record = json.loads(line)
                if record.get("event") == "successor":
                    return str(record["successor"])
            return None

        successor = wait_for("the hand-over", handed, timeout=90)
        wait_for(
            f"job {successor} to finish",
            lambda: slurm.job(successor).finished,  # type: ignore[arg-type]
            timeout=180,
        )
        assert slurm.job(successor).state == "COMPLETED", logs(ckpt)[-4000:]
        first = slurm.job(job_id)
        assert first.state == "COMPLETED" and first.restarts == 0 and not first.requeue
        assert victim not in slurm.job(successor).nodes
    finally:
        if victim is not None:
            slurm.update_node(victim, state="RESUME")
        for job in (job_id, successor):
            if job is not None and not slurm.job(job).finished:
                slurm.cancel(job)
    done = [json.loads(line) for line in (ckpt / "steps.jsonl").read_text().splitlines()]
    assert [d["step"] for d in done] == list(range(STEPS))  # each step once: none lost


def test_the_standard_node_options_keep_a_job_off_every_preemptible_node(
    release: str, box: Sandbox, tmp_path: Path
) -> None:
    """No release negates a feature in --constraint; what a successor bound for standard
    nodes is given instead (`job.handover.placing.standard_args`) clears the script's
    constraint and excludes the preemptible nodes, on every release (nothing submitted)."""
    from slurmpre.job.handover.placing import standard_args

    slurm = CommandLineSlurm()
    script = tmp_path / "job.sbatch"
    script.write_text("#!/bin/sh\n#SBATCH --constraint=preemptible\n#SBATCH --nodes=1\ntrue\n")
    args = standard_args(slurm.nodes(), [])
    proc = subprocess.run(
        ["sbatch", "--test-only", *args, str(script)], capture_output=True, text=True, timeout=30
    )
    assert STANDARD[0] in proc.stderr and "preemptible" not in proc.stderr, proc.stderr
    negated = subprocess.run(
        ["sbatch", "--test-only", "--constraint=!preemptible", str(script)],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert negated.returncode != 0, negated.stderr  # if a release learns it, use it there


@pytest.mark.e2e
def test_torchrun_preempted_on_that_release_matches_an_uninterrupted_run(
    release: str, box: Sandbox, tmp_path: Path
) -> None:
    """The end-to-end smoke of each release: the tiny torchrun job on two nodes (the
    host's interpreter and torch, bound into a root at its own path), drained the
    provider's way, resumes and ends with the weights of an uninterrupted run."""
    pytest.importorskip("torch", reason="the e2e extra (torch==2.13.0) is not installed")
    slurm = CommandLineSlurm()
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    whole.mkdir()
    cut.mkdir()
    wait_done(slurm, submit_tiny(whole, nodes="2"), whole)
    job_id = submit_tiny(cut, nodes="2")
    wait_for("step 12", lambda: step_reached(cut) >= 12, timeout=120)
    victim = slurm.job(job_id).nodes[1]
    preempt_until_done(box, slurm, job_id, cut, PreemptPlan(victim, window=2, return_after=1))
    assert [r["attempt"] for r in progress(cut)] == [0, 1]
    assert same_weights(final_weights(cut), final_weights(whole))


def test_down_unmounts_what_up_mounted_and_leaves_no_process(release: str, box: Sandbox) -> None:
    """Down stops this sandbox's daemons and job steps, and, when no other sandbox runs in
    its root (the suite's workers run theirs beside it, on 26.05), unmounts the root."""
    root = box.root
    shared = bool(others_up(box.state_dir, root.path if root is not None else None))
    steps = procs.holders_of_sockets_under(box.state_dir / "spool")
    slurmpre_cli("sandbox", "down", check=True)
    daemons = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode().split("\0")
            inside = root is not None and (entry / "root").readlink() == root.path
        except OSError:
            continue
        ours = str(box.instance.conf) in argv or int(entry.name) in steps
        if (inside and not shared) or (ours and Path(argv[0]).name.startswith("slurm")):
            daemons.append((int(entry.name), argv[0]))
    assert daemons == []
    assert not procs.holders_of_sockets_under(box.state_dir / "spool")
    if root is not None and not shared:
        assert mounts_under(str(root.path) + "/") == []
        if not others_up(box.state_dir):
            assert not PROFILE.exists()  # login shells find the host's commands again
