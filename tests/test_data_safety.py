"""Data safety, one class of #22 per test: each fails without its fix (tests/test_hostile.py
drives the same classes together over generated folders)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import slurmpre
from slurmpre.errors import CheckpointError
from slurmpre.folder import access
from slurmpre.folder.checkpoints import (
    MAX_STEP,
    check_step,
    judge,
    latest,
    list_all,
    step_dir_name,
    step_of,
)
from slurmpre.folder.ledger import Ledger
from slurmpre.login.prune import prune, size_of

from tests.conftest import slurmpre_cli, wait_for
from tests.fakes import Jobs
from tests.records import dicts, record
from tests.test_hostile import bounded, committed, dcp, fingerprint, hf, sane, torch_zip

# -- links: judged by where they lead, at every level --------------------------------


@pytest.mark.parametrize("depth", ["lightning_logs", "version_0", "checkpoints", "file"])
def test_nothing_is_read_chosen_or_pruned_through_a_link_out_of_the_folder(
    tmp_path: Path, depth: str
) -> None:
    folder, out = tmp_path / "ckpt", tmp_path / "outside"
    committed(folder, 5)
    Ledger(folder).ensure()
    theirs = torch_zip(out / "lightning_logs/version_0/checkpoints/epoch=0-step=50.ckpt")
    link = {
        "lightning_logs": (folder / "lightning_logs", out / "lightning_logs"),
        "version_0": (folder / "lightning_logs/version_0", out / "lightning_logs/version_0"),
        "checkpoints": (
            folder / "lightning_logs/version_0/checkpoints",
            out / "lightning_logs/version_0/checkpoints",
        ),
        "file": (folder / "lightning_logs/version_0/checkpoints/epoch=0-step=50.ckpt", theirs),
    }[depth]
    link[0].parent.mkdir(parents=True, exist_ok=True)
    link[0].symlink_to(link[1])
    through = folder / "lightning_logs/version_0/checkpoints/epoch=0-step=50.ckpt"
    before = fingerprint(out)
    assert latest(folder).checkpoint.path.name == step_dir_name(5)  # type: ignore[union-attr]
    assert all(c.step != 50 for c in list_all(folder))
    verdict = judge(through)
    assert not verdict.complete and "link" in verdict.reason
    with pytest.raises(CheckpointError, match=r"not in the checkpoint folder|not a complete"):
        slurmpre.committed(through, env={"SLURMPRE_CHECKPOINT_DIR": str(folder)})
    done = prune(folder, 1, Jobs({}))
    assert not done.removed
    assert fingerprint(out) == before


def test_prune_takes_no_lock_and_reads_no_ledger_through_a_linked_ledger_folder(
    tmp_path: Path,
) -> None:
    folder, out = tmp_path / "ckpt", tmp_path / "outside"
    committed(folder, 1)
    committed(folder, 2)
    out.mkdir()
    (folder / ".slurmpre").symlink_to(out)
    proc = slurmpre_cli("ckpt", "prune", str(folder), "--keep", "1")
    assert proc.returncode == 1 and "is a link" in proc.stderr, proc
    assert list(out.iterdir()) == []  # no lock file made over there
    assert (folder / step_dir_name(1)).is_dir()


@pytest.mark.parametrize("layout", ["slurmpre", "dcp", "lightning"])
def test_a_link_is_never_a_second_checkpoint_and_its_target_stays(
    tmp_path: Path, layout: str
) -> None:
    folder = tmp_path / "ckpt"
    if layout == "slurmpre":
        old, alias = committed(folder, 5), folder / step_dir_name(10)
    elif layout == "dcp":
        old, alias = dcp(folder, "step_5"), folder / "step_10"
    else:
        ckpts = folder / "lightning_logs/version_0/checkpoints"
        old, alias = torch_zip(ckpts / "epoch=0-step=5.ckpt"), ckpts / "epoch=1-step=10.ckpt"
    alias.symlink_to(old.name)  # a second name, inside the folder
    before = fingerprint(folder)
    Ledger(folder).ensure()
    assert latest(folder).checkpoint.path == old  # type: ignore[union-attr]
    assert not judge(alias).complete
    done = prune(folder, 1, Jobs({}))
    assert old.exists() and latest(folder).checkpoint.path == old  # type: ignore[union-attr]
    assert not done.removed
    assert {k: v for k, v in fingerprint(folder).items() if not k.startswith(".slurmpre")} == before


def test_a_commit_over_a_link_by_its_name_lands_and_leaves_the_target(tmp_path: Path) -> None:
    """A link named step-00000010 to somebody's committed step 10: the commit of step 10
    must not be set aside as a duplicate of it (it would never be found)."""
    folder, out = tmp_path / "ckpt", tmp_path / "outside"
    theirs = committed(out, 10, b"theirs")
    folder.mkdir()
    (folder / step_dir_name(10)).symlink_to(theirs)
    before = fingerprint(out)
    ours = committed(folder, 10, b"ours")
    assert not ours.is_symlink() and (ours / "model.pt").read_bytes() == b"ours"
    assert latest(folder).checkpoint.path == ours  # type: ignore[union-attr]
    assert fingerprint(out) == before


def test_a_marker_of_another_step_does_not_make_a_checkpoint(tmp_path: Path) -> None:
    folder = tmp_path / "ckpt"
    old = committed(folder, 5)
    shutil.copytree(old, folder / step_dir_name(10))  # a copy under a later step's name
    Ledger(folder).ensure()
    verdict = judge(folder / step_dir_name(10))
    assert not verdict.complete and "of step 5, not 10" in verdict.reason
    assert latest(folder).checkpoint.path == old  # type: ignore[union-attr]
    prune(folder, 1, Jobs({}))
    assert old.is_dir() and (folder / step_dir_name(10)).is_dir()  # newer: it may be written


def test_prune_keeps_what_is_not_known_to_be_older_and_names_paths_in_full(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "ckpt"
    ckpts = folder / "lightning_logs"
    early = torch_zip(ckpts / "version_0/checkpoints/epoch=0-step=10.ckpt")
    other = torch_zip(ckpts / "version_1/checkpoints/epoch=0-step=10.ckpt")
    newest = torch_zip(ckpts / "version_1/checkpoints/epoch=1-step=20.ckpt")
    last = torch_zip(ckpts / "version_1/checkpoints/last.ckpt")  # written after step 20
    os.utime(early, (1_000, 1_000))
    os.utime(other, (1_000, 1_000))
    os.utime(newest, (2_000, 2_000))
    os.utime(last, (3_000, 3_000))
    Ledger(folder).ensure()
    done = prune(folder, 1, Jobs({}))
    assert last.exists() and newest.exists()
    assert {e.name for e in done.removed} == {
        "lightning_logs/version_0/checkpoints/epoch=0-step=10.ckpt",
        "lightning_logs/version_1/checkpoints/epoch=0-step=10.ckpt",
    }
    kept = {e.name: e.why for e in done.kept}
    assert (
        "written after the newest complete"
        in kept["lightning_logs/version_1/checkpoints/last.ckpt"]
    )
    # ... and an older last.ckpt goes like any older one.
    os.utime(last, (1_500, 1_500))
    done = prune(folder, 1, Jobs({}))
    assert [e.name for e in done.removed] == ["lightning_logs/version_1/checkpoints/last.ckpt"]


@pytest.mark.parametrize("step", [10**18, 2**63, 10**30])
def test_a_step_the_names_cannot_hold_is_refused_before_it_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: int
) -> None:
    monkeypatch.setenv("SLURMPRE_CHECKPOINT_DIR", str(tmp_path))
    with pytest.raises(CheckpointError, match="at most 999999999999999999"):
        check_step(step)
    with pytest.raises(CheckpointError, match="at most"), slurmpre.checkpoint(step):
        pass
    assert not list(tmp_path.glob("step-*"))


def test_the_largest_step_commits_and_is_found(tmp_path: Path) -> None:
    committed(tmp_path, MAX_STEP)
    assert step_of(step_dir_name(MAX_STEP)) == MAX_STEP
    assert latest(tmp_path).checkpoint.step == MAX_STEP  # type: ignore[union-attr]


def test_the_trainers_own_save_in_progress_is_partial(tmp_path: Path) -> None:
    hf(tmp_path, 10)
    saving = hf(tmp_path, 20, saving=True)
    assert not judge(saving).complete
    assert "checkpoint-is-incomplete.txt" in judge(saving).reason
    assert latest(tmp_path).checkpoint.step == 10  # type: ignore[union-attr]


def test_prune_says_what_it_could_not_remove_and_exits_1(tmp_path: Path) -> None:
    """A file prune may not delete (immutable here: as a mode-000 folder of another user
    would be), inside a checkpoint it removes: it says what stays, frees only what went."""
    folder = tmp_path / "ckpt"
    committed(folder, 1, b"x" * 5000)
    stuck = committed(folder, 2, b"y" * 7000)
    committed(folder, 3)
    Ledger(folder).ensure()
    pinned = stuck / "sub" / "optim.pt"
    chattr = subprocess.run(["chattr", "+i", str(pinned)], capture_output=True, check=False)
    if chattr.returncode != 0:
        pytest.fail(f"chattr +i did not work here: {chattr.stderr!r}")
    sizes = {step: size_of(folder / step_dir_name(step)) for step in (1, 2)}
    try:
        first = slurmpre_cli("ckpt", "prune", str(folder), "--keep", "1", "--json")
        proc = slurmpre_cli("ckpt", "prune", str(folder), "--keep", "1")
    finally:
        for path in folder.glob(".pruned-*/sub/optim.pt"):
            subprocess.run(["chattr", "-i", str(path)], check=True)
    # What went is freed, step 1 whole and step 2 but its pinned 14,000 bytes; exit 1.
    assert first.returncode == 1, first
    report = json.loads(first.stdout)
    assert [e["name"] for e in report["removed"]] == ["step-00000001"]
    assert [f["name"] for f in report["failed"]] == ["step-00000002"]
    assert report["freed_bytes"] == sizes[1] + sizes[2] - 14_000
    assert not (folder / step_dir_name(1)).exists()
    # Asked again: it says so in words, frees nothing more, and still exits 1.
    assert proc.returncode == 1, proc
    assert "could not remove step-00000002 (left as .pruned-step-00000002-" in proc.stdout
    assert "Operation not permitted" in proc.stdout
    assert "removed step-00000002 (" not in proc.stdout
    assert "freed 0 B" in proc.stdout
    assert "could not remove 1 entries: step-00000002" in proc.stderr


# -- reads that never block, never grow without bound ------------------------------
@pytest.mark.parametrize("kind", ["fifo", "zero", "huge"])
@pytest.mark.parametrize(
    "place", ["latest", "marker", ".metadata", "trainer_state.json", "ckpt", "ledger"]
)
def test_no_special_file_where_a_file_is_read_makes_a_command_hang(
    tmp_path: Path, place: str, kind: str
) -> None:
    folder = tmp_path / "ckpt"
    committed(folder, 1)
    Ledger(folder).ensure()
    target = {
        "latest": folder / "latest",
        "marker": folder / step_dir_name(2) / ".slurmpre-complete",
        ".metadata": folder / "step_3" / ".metadata",
        "trainer_state.json": folder / "checkpoint-4" / "trainer_state.json",
        "ckpt": folder / "lightning_logs/version_0/checkpoints/epoch=0-step=5.ckpt",
        "ledger": folder / ".slurmpre" / "attempts.jsonl",
    }[place]
    target.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "zero":
        target.symlink_to("/dev/zero")
    else:  # a regular file of 4 GB, sparse: read whole, it would not fit in the limit
        with target.open("wb") as fh:
            fh.truncate(4 << 30)
    for args in (["ckpt", "latest"], ["ckpt", "list", "--all"], ["plan"]):
        proc = sane(bounded(*args, str(folder), timeout=30))
        if args[1:] == ["latest"]:
            assert proc.stdout.strip() == str(folder / step_dir_name(1)), proc.stderr


@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_logs_never_hang_on_a_special_file_by_the_logs_name(tmp_path: Path, kind: str) -> None:
    folder = tmp_path / "ckpt"
    # A job id Slurm has not given out here (the cluster's tests may run beside this one).
    Ledger(folder).append(record({"event": "submitted", "job": "999997", "name": "n"}))
    log = folder / "logs" / "n-999997.out"
    log.parent.mkdir()
    if kind == "fifo":
        os.mkfifo(log)
    else:
        log.symlink_to("/dev/zero")
    proc = sane(bounded("logs", "999997", "--checkpoint-dir", str(folder), timeout=30))
    assert proc.returncode == 1 and "not a regular file" in proc.stderr, proc.stderr


@pytest.mark.parametrize("spec", ["/dev/zero", "fifo", "binary", "extends-itself", "loop"])
def test_render_never_hangs_on_what_it_reads(tmp_path: Path, spec: str) -> None:
    path = tmp_path / "job.toml"
    body = 'name = "a"\ncommand = ["python", "t.py"]\n'
    if spec == "/dev/zero":
        path = Path("/dev/zero")
    elif spec == "fifo":
        os.mkfifo(path)
    else:
        path.write_text(body + 'template = "t.j2"\n')
        template = {
            "binary": b"\x7fELF\x02\x01\x01\x00\xff\xfe",
            "extends-itself": b'{% extends "t.j2" %}\n',
            "loop": b'{% include "u.j2" %}\n',
        }[spec]
        (tmp_path / "t.j2").write_bytes(template)
        (tmp_path / "u.j2").write_bytes(b'{% include "t.j2" %}\n')
    proc = sane(bounded("render", str(path), timeout=30))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr


# -- the batch script ----------------------------------------------------------------
@pytest.mark.parametrize(
    "setup",
    [
        ["cat > cfg.yaml <<EOF", "lr: 1"],  # the issue's own: the launch line is swallowed
        ["cat > cfg.yaml <<'END'", "lr: 1", "EOF"],
        ['echo "unclosed'],
        ["if true; then", "echo yes"],
        ["for x in 1 2; do"],
    ],
)
def test_a_setup_that_would_swallow_the_launch_line_is_refused(setup: list[str]) -> None:
    from slurmpre.login.spec import SpecError, validate

    with pytest.raises(SpecError, match="setup: its lines are not whole shell commands"):
        validate({"name": "n", "command": ["python", "t.py"], "setup": setup})


def test_a_job_that_ends_inside_its_setup_block_fails(tmp_path: Path) -> None:
    """The end marker: bash runs the rendered script's setup block (srun stubbed: nothing
    of Slurm runs here); a block that ends the script early fails it, one that ends goes on."""
    from slurmpre.login.render import render
    from slurmpre.login.spec import validate

    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "srun").write_text("#!/bin/sh\necho launched\n")
    (stub / "srun").chmod(0o755)
    env = {**os.environ, "PATH": f"{stub}:{os.environ['PATH']}", "SLURM_JOB_ID": "1"}
    for setup, code, said in (
        (["echo ready"], 0, "launched"),
        (["echo ready", "exit 0"], 1, "ended inside its setup block"),
    ):
        spec = validate(
            {
                "name": "n",
                "command": ["python", "t.py"],
                "setup": setup,
                "log_dir": str(tmp_path / "logs"),
                "checkpoint_dir": str(tmp_path / "ck"),
            }
        )
        proc = subprocess.run(
            ["bash", "-c", render(spec)], env=env, capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == code, (setup, proc.stdout, proc.stderr)
        assert said in proc.stdout + proc.stderr


# -- numbers and records of the wrong shape ---------------------------------------
def test_plan_with_a_checkpoint_longer_than_the_mtbf_says_nothing_gets_done() -> None:
    proc = slurmpre_cli(
        "plan", "--checkpoint-seconds", "1000", "--mtbf", "1", "--restart-seconds", "1", "--json"
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout, parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))
    assert out["periodic"]["goodput"] == 0.0
    assert out["periodic"]["cost_per_useful_gpu_hour"] is None  # infinite: no useful work


@pytest.mark.parametrize("price", ["inf", "nan", "-1"])
def test_a_price_that_is_no_amount_is_refused(tmp_path: Path, price: str) -> None:
    for args in (
        ["status", "1", "--checkpoint-dir", str(tmp_path)],
        ["plan", "--mtbf", "9", "--checkpoint-seconds", "1", "--restart-seconds", "1"],
    ):
        proc = slurmpre_cli(*args, "--price", price)
        assert proc.returncode == 2, proc
        assert "--price" in proc.stderr


@pytest.mark.parametrize("command", [["cancel", "1"], ["ckpt", "prune", "/tmp", "--keep", "1"]])
def test_a_wait_that_is_no_number_of_seconds_is_refused(command: list[str]) -> None:
    proc = slurmpre_cli(*command, "--wait", "nan")
    assert proc.returncode == 2 and "--wait nan" in proc.stderr, proc


BAD_RECORDS = [
    {"event": "start", "job": [1], "attempt": 0, "time": 1.0},
    {"event": "end", "job": "999996", "attempt": 0, "time": "soon", "seconds": 3},
    {"event": "start", "job": "999996", "attempt": 1, "time": 2.0, "nodes": 5},
    {"event": "checkpoint", "job": "999996", "attempt": 0, "time": 3.0, "seconds": 1e400},
    {"event": "requeued", "job": "999996", "attempt": 0, "time": 4.0, "requeued_at": [4]},
    {"job": "999996", "attempt": 0, "time": 4.0},
    {"event": "notice", "job": "999996", "attempt": 0, "time": True},
]


def test_a_ledger_record_of_the_wrong_shape_is_skipped_with_one_warning(tmp_path: Path) -> None:
    folder = tmp_path / "ckpt"
    ledger = Ledger(folder)
    ledger.append(record({"event": "submitted", "job": "999996", "name": "n"}))
    ledger.append(record({"event": "start", "job": "999996", "attempt": 0, "nodes": ["n1"]}))
    with ledger.path.open("a") as fh:
        for bad in BAD_RECORDS:
            fh.write(json.dumps(bad).replace("Infinity", "1e400") + "\n")
    warned: list[str] = []
    for _ in range(2):  # two readers of one file in one process: each line named once
        records = dicts(Ledger(folder, warn=warned.append))
        assert [r["event"] for r in records] == ["submitted", "start"]
    assert len(warned) == len(BAD_RECORDS), warned
    for args in (
        ["status", "999996", "--checkpoint-dir", str(folder), "--json"],
        ["plan", str(folder), "--mtbf", "100", "--checkpoint-seconds", "1"],
        ["logs", "999996", "--checkpoint-dir", str(folder)],
    ):
        proc = sane(bounded(*args))
        assert proc.stderr.count("skipping line") == len(BAD_RECORDS), proc.stderr


def test_a_submission_record_of_the_wrong_shape_is_skipped(tmp_path: Path) -> None:
    state = tmp_path / "state" / "slurmpre"
    state.mkdir(parents=True)
    good = {"job": "999998", "name": "n", "checkpoint_dir": str(tmp_path), "log_dir": str(tmp_path)}
    lines = [
        {**good, "submitted_at": 1.0},
        {**good, "job": [1], "submitted_at": 1.0},
        {**good, "checkpoint_dir": 5, "submitted_at": 1.0},
        {**good, "submitted_at": "soon"},
        {**good, "submitted_at": 1e400},
    ]
    (state / "jobs.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    proc = subprocess.run(
        [sys.executable, "-m", "slurmpre", "logs", "n"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    sane(proc)
    assert proc.stderr.count("skipping line") == 4, proc.stderr
    assert "no log at" in proc.stderr  # it found the job by its name


# -- modes: nothing slurmpre creates is writable by others ----------------------------
@pytest.mark.parametrize("who", [access.OWNER, access.GROUP])
def test_folders_made_under_umask_000_are_never_open_to_others(
    tmp_path: Path, who: access.Access
) -> None:
    old = os.umask(0)
    try:
        folder = tmp_path / "a" / "b" / "ckpt"
        Ledger(folder, access=who).append(record({"event": "submitted", "job": "1", "name": "n"}))
        with Ledger(folder, access=who).writing_lock(5):
            pass
        access.make_dirs(tmp_path / "x" / "y" / "z", who)
    finally:
        os.umask(old)
    # The folder asked for has the access's mode; the ones made above it are never
    # writable by the group (no one could rename another job's folder there); the job's
    # own .slurmpre never either.
    above = [tmp_path / "a", tmp_path / "a/b", tmp_path / "x", tmp_path / "x/y"]
    for path in above:
        assert stat.S_IMODE(path.stat().st_mode) == who.above_mode, path
    for path in (folder, tmp_path / "x/y/z"):
        assert stat.S_IMODE(path.stat().st_mode) == who.dir_mode, path
    assert (folder / ".slurmpre").stat().st_mode & 0o777 == who.meta_mode
    for lock in (folder / ".slurmpre").iterdir():
        assert lock.stat().st_mode & 0o022 == 0, lock


# -- the console command keeps the time-limit latch -------------------------------
def test_slurmpre_run_survives_the_time_limit_warning_from_its_start(tmp_path: Path) -> None:
    """`slurmpre run` (the console script the README names) installs the latch before it
    imports anything: Slurm's warning (SIGUSR2) during the job must not kill it."""
    ready, go = tmp_path / "ready", tmp_path / "go"
    script = tmp_path / "train.py"
    script.write_text(
        "import pathlib, time\n"
        f"pathlib.Path({str(ready)!r}).touch()\n"
        f"while not pathlib.Path({str(go)!r}).exists():\n"
        "    time.sleep(0.05)\n"
    )
    console = Path(sys.executable).parent / "slurmpre"
    (tmp_path / "ck").mkdir()
    env = {
        **os.environ,
        "SLURM_JOB_ID": "77",
        "SLURM_JOB_NODELIST": "n1",
        "SLURM_NODELIST": "n1",
        "SLURMD_NODENAME": "n1",
        "SLURM_JOB_NUM_NODES": "1",
    }
    proc = subprocess.Popen(
        [str(console), "run", "--launcher", "plain", f"--checkpoint-dir={tmp_path / 'ck'}",
         "--no-watch", "--", sys.executable, str(script)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    try:
        wait_for("the training to start", ready.exists, timeout=60)
        proc.send_signal(signal.SIGUSR2)  # its default action kills at delivery
        go.touch()
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out


@pytest.mark.parametrize("who", [access.OWNER, access.GROUP])
def test_the_batch_script_makes_its_log_folders_closed_under_umask_000(
    tmp_path: Path, who: access.Access
) -> None:
    from slurmpre.login.render import render
    from slurmpre.login.spec import validate

    spec = validate({"name": "n", "command": ["python", "t.py"], "file_access": who.name})
    (line,) = [x for x in render(spec).splitlines() if "mkdir" in x and "LOG_DIR" in x]
    logs = tmp_path / "a" / "b" / "logs"
    subprocess.run(
        ["bash", "-c", f"umask 000; {line}"],
        env={**os.environ, "SLURMPRE_LOG_DIR": str(logs)},
        check=True,
    )
    for path in (tmp_path / "a", tmp_path / "a" / "b"):
        assert stat.S_IMODE(path.stat().st_mode) == who.above_mode, path
    assert stat.S_IMODE(logs.stat().st_mode) == who.dir_mode
