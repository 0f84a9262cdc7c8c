"""Specs rendered, submitted to the real sandbox, and run."""

from __future__ import annotations

import getpass
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.sandbox.preempt import PreemptPlan, preempt, restore_node
from slurmpre.slurm.client import CommandLineSlurm

from tests.conftest import slurmpre_cli, wait_for

pytestmark = pytest.mark.sandbox

HOSTILE_NAME = "job 'q' \"dq\" $(touch pwned) `touch pwned2`; echo x é中 50%"
HOSTILE_ARGS = ["a b", "$(touch pwned3)", "`id`", "; rm -rf ~", "'", '"', "é中", "new\nline", ""]
HOSTILE_ENV = "$(touch pwned4) `id` 'single' \"double\" ; & | \\ é中\nsecond line"
HOSTILE_ENV_SPEC = HOSTILE_ENV.replace("$", "$$")  # a literal $ in the spec is $$
HOSTILE_ARGS_SPEC = [a.replace("$", "$$") for a in HOSTILE_ARGS]  # the command's too

DUMP = (
    "import json, os, sys; "
    "json.dump({'argv': sys.argv[1:], 'env': os.environ['TRICKY'], "
    "'name': os.environ['SLURM_JOB_NAME']}, "
    "open(os.path.join(os.environ['SLURMPRE_CHECKPOINT_DIR'], 'out.json'), 'w'))"
)


def write_spec(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def toml_str(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)  # a JSON string is a valid TOML basic string


def toml_path(path: Path) -> str:
    """A path as a path key's value: its every $ (shared_tmp has one) written $$."""
    return toml_str(str(path).replace("$", "$$"))


def test_submitted_spec_shows_the_contract_and_runs_on_preemptible_nodes(
    slurm: CommandLineSlurm, shared_tmp: Path
) -> None:
    spec = write_spec(
        shared_tmp / "held.toml",
        [
            'name = "held"',
            'command = ["bash", "-c", "echo ran on $SLURMD_NODENAME"]',
            'nodes = "1-2"',
            'launcher = "plain"',
            f"checkpoint_dir = {toml_path(shared_tmp / 'ckpt')}",
            'extra_sbatch = ["--hold"]',
        ],
    )
    proc = slurmpre_cli("submit", str(spec), check=True)
    job_id = proc.stdout.strip()
    info = slurm.job(job_id)
    assert info.features == "preemptible"
    assert info.requeue
    assert info.num_nodes == "1-2"
    assert info.stdout == f"{shared_tmp}/ckpt/logs/held-{job_id}.out"
    subprocess.run(["scontrol", "release", job_id], check=True)
    wait_for("the job to finish", lambda: slurm.job(job_id).finished, timeout=90)
    assert slurm.job(job_id).state == "COMPLETED"
    log = Path(f"{shared_tmp}/ckpt/logs/held-{job_id}.out").read_text()
    # a job that may run on 2 nodes: each node's lines carry its place (srun --label)
    ran = [ln.partition(": ") for ln in log.splitlines() if ": ran on " in ln]
    assert ran and all(place.isdigit() for place, _, _ in ran), log
    ran_on = [said.split()[-1] for _, _, said in ran]
    assert all(n.startswith("gpu-preemptible-dp-") for n in ran_on)
    assert (shared_tmp / "ckpt" / "logs" / f"held-{job_id}.attempt-0.out").exists()
    assert (shared_tmp / "ckpt" / "logs" / f"held-{job_id}.sbatch").exists()


def test_the_users_sbatch_variables_cannot_change_what_slurmpre_sets(
    slurm: CommandLineSlurm, shared_tmp: Path
) -> None:
    """sbatch takes SBATCH_* variables over a script's #SBATCH lines (22.05, 24.11 and
    26.05 alike): slurmpre gives its options on sbatch's command line, which wins."""
    spec = write_spec(
        shared_tmp / "mine.toml",
        [
            'name = "mine"',
            'command = ["true"]',
            'launcher = "plain"',
            f"checkpoint_dir = {toml_path(shared_tmp / 'ckpt')}",
            'extra_sbatch = ["--hold"]',
        ],
    )
    theirs = {
        "SBATCH_JOB_NAME": "theirs",
        "SBATCH_NO_REQUEUE": "1",
        "SBATCH_CONSTRAINT": "standard",
    }
    job_id = slurmpre_cli("submit", str(spec), check=True, env=theirs).stdout.strip()
    try:
        info = slurm.job(job_id)
        assert (info.name, info.requeue, info.features) == ("mine", True, "preemptible")
    finally:
        slurm.cancel(job_id)


def test_hostile_values_do_exactly_what_they_say(
    slurm: CommandLineSlurm, shared_tmp: Path, tmp_path: Path
) -> None:
    ckpt = shared_tmp / "it's $HOME `x` ckpt"  # in the spec: $$HOME
    spec = write_spec(
        tmp_path / "hostile.toml",
        [
            f"name = {toml_str(HOSTILE_NAME)}",
            "command = "
            + json.dumps([sys.executable, "-c", DUMP, *HOSTILE_ARGS_SPEC], ensure_ascii=False),
            'launcher = "plain"',
            f"checkpoint_dir = {toml_path(ckpt)}",
            f"env = {{ TRICKY = {toml_str(HOSTILE_ENV_SPEC)} }}",
        ],
    )
    proc = slurmpre_cli("submit", str(spec), check=True, cwd=tmp_path)
    job_id = proc.stdout.strip()
    wait_for("the job to finish", lambda: slurm.job(job_id).finished, timeout=90)
    assert slurm.job(job_id).state == "COMPLETED", (ckpt / "logs").iterdir()
    assert slurm.job(job_id).name == HOSTILE_NAME
    out = json.loads((ckpt / "out.json").read_text())
    assert out == {"argv": HOSTILE_ARGS, "env": HOSTILE_ENV, "name": HOSTILE_NAME}
    for folder in (tmp_path, ckpt, ckpt / "logs", Path.home()):
        assert not list(folder.glob("pwned*")), folder


def test_variables_expand_where_the_spec_says(
    slurm: CommandLineSlurm, shared_tmp: Path, tmp_path: Path
) -> None:
    """Path keys expand at submit, from the submitting environment; env values on the
    node, from the job's environment as it starts; $$ is a $."""
    dump = (
        "import json, os; json.dump({k: os.environ.get(k) for k in ('LD_LIBRARY_PATH', "
        "'WHERE', 'LIT', 'OLD')}, open(os.environ['SLURMPRE_CHECKPOINT_DIR'] + '/env.json', 'w'))"
    )
    spec = write_spec(
        tmp_path / "vars.toml",
        [
            'name = "vars"',
            f"command = {json.dumps([sys.executable, '-c', dump])}",
            'launcher = "plain"',
            'checkpoint_dir = "${SLURMPRE_TEST_BASE}/ck-$USER"',
            "[env]",
            'LD_LIBRARY_PATH = "/opt/nccl/lib:$LD_LIBRARY_PATH"',
            'WHERE = "$SLURMD_NODENAME/${SLURM_JOB_ID}"',
            'LIT = "$$USER costs $$5"',
            'OLD = "${LIT}"',  # the job's LIT (none), not the spec's
        ],
    )
    user = os.environ.get("USER") or getpass.getuser()  # CI may not set it: then here
    environ = {
        "SLURMPRE_TEST_BASE": str(shared_tmp),
        "LD_LIBRARY_PATH": "/usr/local/lib/x",
        "USER": user,
    }
    job_id = slurmpre_cli("submit", str(spec), check=True, cwd=tmp_path, env=environ)
    job_id = job_id.stdout.strip()
    wait_for("the job to finish", lambda: slurm.job(job_id).finished, timeout=90)
    ckpt = shared_tmp / f"ck-{user}"
    assert slurm.job(job_id).state == "COMPLETED", list((ckpt / "logs").iterdir())
    node = slurm.job(job_id).nodes[0]
    assert json.loads((ckpt / "env.json").read_text()) == {
        "LD_LIBRARY_PATH": "/opt/nccl/lib:/usr/local/lib/x",
        "WHERE": f"{node}/{job_id}",
        "LIT": "$USER costs $5",
        "OLD": "",
    }
    # An unset variable in a path is refused before anything is made or queued.
    lines = ['name = "vars"', 'command = ["x"]', 'checkpoint_dir = "/tmp/$SLURMPRE_NOT_SET/ck"']
    bad = write_spec(tmp_path / "bad.toml", lines)
    proc = slurmpre_cli("submit", str(bad), cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == (
        "slurmpre: error: checkpoint_dir = '/tmp/$SLURMPRE_NOT_SET/ck': $SLURMPRE_NOT_SET is "
        "not set where you submit\n"
    )


SAVE_ONE = (
    "import os, slurmpre\n"
    "with slurmpre.checkpoint(1) as path:\n"
    "    (path / ('w' + os.environ['SLURM_PROCID'])).write_bytes(b'x')\n"
)


def test_under_umask_000_what_slurmpre_creates_stays_owner_only(
    slurm: CommandLineSlurm, shared_tmp: Path
) -> None:
    """sbatch hands the submitting umask to the job: with 000, every file slurmpre
    creates on the way (folders, ledger, locks, choice, the committed checkpoint of
    two nodes meeting through the folder) must still be the owner's alone."""
    ckpt = shared_tmp / "private"
    spec = write_spec(
        shared_tmp / "private.toml",
        [
            'name = "private"',
            "command = " + json.dumps([sys.executable, "-c", SAVE_ONE]),
            "nodes = 2",
            'launcher = "plain"',
            f"checkpoint_dir = {toml_path(ckpt)}",
        ],
    )
    old = os.umask(0o000)
    try:
        job_id = slurmpre_cli("submit", str(spec), check=True).stdout.strip()
    finally:
        os.umask(old)
    wait_for("the job to finish", lambda: slurm.job(job_id).finished, timeout=120)
    assert slurm.job(job_id).state == "COMPLETED", list((ckpt / "logs").iterdir())
    ledger = ckpt / ".slurmpre"
    want = {
        ckpt: 0o700,
        ckpt / "logs": 0o700,
        ckpt / "logs" / f"private-{job_id}.sbatch": 0o600,
        ledger: 0o700,
        ledger / "attempts.jsonl": 0o600,
        ledger / "ledger.lock": 0o600,
        ledger / f"choice-{job_id}-0.json": 0o600,
        ckpt / "step-00000001": 0o700,
        ckpt / "step-00000001" / ".slurmpre-complete": 0o600,
    }
    assert {p: stat.S_IMODE(p.stat().st_mode) for p in want} == want
    assert sorted(p.name for p in (ckpt / "step-00000001").iterdir()) == [
        ".slurmpre-complete",
        "w0",
        "w1",
    ]
    loose = [
        f"{p} {stat.S_IMODE(p.stat().st_mode):o}"
        for p in ledger.iterdir()
        if stat.S_IMODE(p.stat().st_mode) & 0o077
    ]
    assert not loose


def test_test_only_asks_slurm_without_queuing(slurm: CommandLineSlurm, shared_tmp: Path) -> None:
    spec = write_spec(
        shared_tmp / "t.toml",
        ['name = "t"', 'command = ["true"]', 'nodes = "1-2"', "gpus_per_node = 1"],
    )
    proc = slurmpre_cli("submit", str(spec), "--test-only", check=True)
    assert "to start at" in proc.stdout and "gpu-preemptible-dp-" in proc.stdout
    bad = write_spec(
        shared_tmp / "bad.toml",
        ['name = "t"', 'command = ["true"]', "nodes = 9", 'launcher = "plain"'],
    )
    proc = slurmpre_cli("submit", str(bad), "--test-only")
    assert proc.returncode == 1  # every check of submit first, then Slurm's verdict
    assert "slurmpre: error: command failed (exit 1): sbatch --test-only" in proc.stderr
    assert "Requested node configuration is not available" in proc.stderr


def test_log_keeps_every_attempt_across_a_preemption(
    sandbox: Sandbox, slurm: CommandLineSlurm, shared_tmp: Path
) -> None:
    spec = write_spec(
        shared_tmp / "ticks.toml",
        [
            'name = "ticks"',
            'command = ["bash", "-c", "for i in $$(seq 1 300); do echo tick $$i; sleep 0.5; done"]',
            'launcher = "plain"',
            # Slurm's requeue is what this test follows: with the default successor, a
            # drain the watcher sees within the 2 s window hands over to another job.
            'restart = "requeue"',
            f"checkpoint_dir = {toml_path(shared_tmp / 'ticks')}",
        ],
    )
    job_id = slurmpre_cli("submit", str(spec), check=True).stdout.strip()
    logs = shared_tmp / "ticks" / "logs"
    job = wait_for("the job to run", lambda: (j := slurm.job(job_id)).state == "RUNNING" and j)
    # RUNNING comes before slurmd has created the log: wait for the file, too.
    main = logs / f"ticks-{job_id}.out"
    wait_for("a first tick", lambda: main.exists() and "tick 2" in main.read_text())
    victim = job.nodes[0]
    try:
        preempt(sandbox, PreemptPlan(victim, window=2))
        wait_for(
            "the restart",
            lambda: (j := slurm.job(job_id)).state == "RUNNING" and j.restarts == 1,
            timeout=90,
        )
        wait_for(
            "a tick of the second attempt",
            lambda: (
                "tick 2" in (logs / f"ticks-{job_id}.attempt-1.out").read_text()
                if (logs / f"ticks-{job_id}.attempt-1.out").exists()
                else False
            ),
        )
    finally:
        slurm.cancel(job_id)
        restore_node(sandbox, victim)
    main_log = (logs / f"ticks-{job_id}.out").read_text()
    assert f"job {job_id} attempt 0 on" in main_log
    assert f"job {job_id} attempt 1 on" in main_log
    first = (logs / f"ticks-{job_id}.attempt-0.out").read_text()
    second = (logs / f"ticks-{job_id}.attempt-1.out").read_text()
    assert "tick 2" in first and "tick 2" in second
    assert main_log.index("attempt 0 on") < main_log.index("attempt 1 on")


def test_one_live_job_per_checkpoint_folder(
    sandbox: Sandbox, slurm: CommandLineSlurm, shared_tmp: Path
) -> None:
    """Submitting the same spec twice: refused while the first is live; forced, the second
    job's wrapper refuses to train over the first's checkpoints; once the first is gone, a
    resubmission trains (a dead holder never blocks)."""
    ckpt = shared_tmp / "twice"
    # $$: bash expands them, not slurmpre (the folder's name holds `$(echo)`, which bash
    # would run again were it pasted into the script)
    started = 'echo started > "$$SLURMPRE_CHECKPOINT_DIR/started-$$SLURM_JOB_ID"; sleep 300'
    spec = write_spec(
        shared_tmp / "twice.toml",
        [
            'name = "twice"',
            f"command = {json.dumps(['bash', '-c', started])}",
            'launcher = "plain"',
            'constraint = "standard"',
            f"checkpoint_dir = {toml_path(ckpt)}",
        ],
    )
    jobs: list[str] = []
    try:
        jobs.append(first := slurmpre_cli("submit", str(spec), check=True).stdout.strip())
        wait_for("the first job to train", (ckpt / f"started-{first}").exists, timeout=60)
        again = slurmpre_cli("submit", str(spec))
        assert again.returncode == 2, again.stderr
        assert f"is in use by job {first} (RUNNING)" in again.stderr
        assert len(again.stderr.splitlines()) == 1
        # Forced onto the other nodes, it runs beside the first: its wrapper refuses.
        forced = slurmpre_cli(
            "submit", str(spec), "--force", "--set", "constraint=preemptible", check=True
        ).stdout.strip()
        jobs.append(forced)
        wait_for(f"job {forced} to end", lambda: slurm.job(forced).finished, timeout=120)
        assert slurm.job(forced).state == "FAILED"
        log = (ckpt / "logs" / f"twice-{forced}.out").read_text()
        assert f"is in use by job {first} (RUNNING): refusing to train" in log
        assert not (ckpt / f"started-{forced}").exists()
        slurm.cancel(first)
        wait_for(f"job {first} to end", lambda: slurm.job(first).finished, timeout=60)
        jobs.append(third := slurmpre_cli("submit", str(spec), check=True).stdout.strip())
        wait_for("the resubmitted job to train", (ckpt / f"started-{third}").exists, timeout=60)
    finally:
        for job in jobs:
            slurm.cancel(job)


@pytest.mark.parametrize(
    ("python", "message"),
    [
        ("/usr/bin/python3", "cannot import slurmpre (ModuleNotFoundError"),
        ("/nonexistent/bin/python", "cannot run"),
    ],
)
def test_a_python_without_slurmpre_is_refused_before_the_job_waits(
    python: str, message: str, tmp_path: Path
) -> None:
    from slurmpre.errors import UsageError
    from slurmpre.login.submit import check_python

    with pytest.raises(UsageError, match=re.escape(message)):
        check_python(python, cwd=tmp_path)  # not the checkout, where any python finds it
    check_python(sys.executable, cwd=tmp_path)
