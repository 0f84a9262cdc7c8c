"""The batch script's supervisor of steps, with a stand-in srun and a recording Slurm client.

The stand-in srun is a real process (the supervisor starts, waits for and
signals it as it would srun); what Slurm does is the client's part. The same
path runs on the real sandbox in tests/e2e/test_login.py, and on every supported
Slurm release in tests/versions/test_contract.py.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from slurmpre.errors import SlurmError, UsageError
from slurmpre.folder.layout import FolderLayout
from slurmpre.folder.ledger import Ledger
from slurmpre.job.handover.inplace import Request, write_request
from slurmpre.job.handover.steps import Steps, resized_env, step_argv
from slurmpre.job.handover.steps_args import parse_args
from slurmpre.job.start.env import read_job_env
from slurmpre.lines import sent_to

from tests.fakes import FakeSlurm
from tests.records import dicts

NODES = "gpu-preemptible-dp-[1-3]"
KEEP = ("gpu-preemptible-dp-1", "gpu-preemptible-dp-3")

# A stand-in for srun: logs what it was given; in the first step it asks for an
# in-place restart as the watcher would, then exits (or, with HANG, never does).
SRUN = r"""
import json, os, sys, time
log, request = os.environ["STEPS_LOG"], os.environ["STEPS_REQUEST"]
with open(log, "a") as fh:
    fh.write(json.dumps({"argv": sys.argv[1:], "in_place": os.environ["SLURMPRE_IN_PLACE"],
        "batch_host": os.environ.get("SLURMPRE_BATCH_HOST"),
        "nodelist": os.environ["SLURM_JOB_NODELIST"],
        "ntasks": os.environ.get("SLURM_NTASKS")}) + "\n")
if os.environ["SLURMPRE_IN_PLACE"] == "0" and os.environ.get("STEPS_ASK"):
    with open(request + ".tmp", "w") as fh:
        json.dump({"keep": json.loads(os.environ["STEPS_KEEP"]),
                   "release": ["gpu-preemptible-dp-2"], "why": "test", "at": time.time()}, fh)
    os.rename(request + ".tmp", request)
    if os.environ.get("STEPS_HANG"):
        time.sleep(600)
sys.exit(int(os.environ.get("STEPS_EXIT", "0")))
"""


class Slurm(FakeSlurm):
    def __init__(self, *, resize_fails: bool = False) -> None:
        self.resized: list[tuple[str, tuple[str, ...]]] = []
        self.requeued: list[str] = []
        self.resize_fails = resize_fails

    def resize(self, job_id: str, nodes: Sequence[str]) -> dict[str, str | None]:
        if self.resize_fails:
            raise SlurmError("command failed (exit 1): scontrol update\n    Job not running")
        self.resized.append((job_id, tuple(nodes)))
        joined = ",".join(nodes)
        return {
            "SLURM_JOB_NODELIST": joined,
            "SLURM_NODELIST": joined,
            "SLURM_JOB_NUM_NODES": str(len(nodes)),
            "SLURM_NNODES": str(len(nodes)),
            "SLURM_TASKS_PER_NODE": None,
        }

    def requeue(self, job_id: str) -> None:
        self.requeued.append(job_id)


def setup(tmp_path: Path, **extra: str) -> tuple[dict[str, str], Path, Path]:
    srun = tmp_path / "srun"
    srun.write_text(f"#!{sys.executable}\n{SRUN}")
    srun.chmod(0o755)
    folder = tmp_path / "ckpt"
    (folder / ".slurmpre").mkdir(parents=True)
    log = tmp_path / "steps.jsonl"
    env = {
        **os.environ,
        "SLURM_JOB_ID": "77",
        "SLURM_JOB_NODELIST": NODES,
        "SLURMD_NODENAME": "gpu-preemptible-dp-1",
        "SLURM_NTASKS": "3",
        "STEPS_LOG": str(log),
        "STEPS_REQUEST": str(FolderLayout(folder).in_place_request("77", "0")),
        "STEPS_KEEP": json.dumps(KEEP),
        **extra,
    }
    return env, folder, log


def steps(
    tmp_path: Path, env: dict[str, str], folder: Path, slurm: Slurm, *argv: str
) -> tuple[int, list[str], Slurm]:
    said: list[str] = []
    srun = str(tmp_path / "srun")
    opts = parse_args([f"--checkpoint-dir={folder}", *argv, "--", srun, "--ntasks-per-node=1"])
    with sent_to(said.append, "slurmpre.job", every_thread=True):  # as `main` sends them
        code = Steps(opts, read_job_env(env), env, slurm).run()
    return code, said, slurm


def lines(log: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_without_a_request_it_runs_one_step_and_exits_with_its_code(tmp_path: Path) -> None:
    env, folder, log = setup(tmp_path, STEPS_EXIT="3")
    code, _said, slurm = steps(tmp_path, env, folder, Slurm())
    assert code == 3
    (only,) = lines(log)
    assert only["argv"] == ["--ntasks-per-node=1"]
    assert (only["in_place"], only["batch_host"]) == ("0", "gpu-preemptible-dp-1")
    assert slurm.resized == [] and slurm.requeued == []


def test_a_request_releases_the_nodes_and_runs_the_next_step_on_the_rest(tmp_path: Path) -> None:
    env, folder, log = setup(tmp_path, STEPS_ASK="1")
    code, said, slurm = steps(tmp_path, env, folder, Slurm())
    assert code == 0
    assert slurm.resized == [("77", KEEP)] and slurm.requeued == []
    first, second = lines(log)
    assert first["in_place"] == "0"
    assert second["in_place"] == "1"
    assert second["argv"] == [
        "--nodes=2",
        "--ntasks=2",
        f"--nodelist={','.join(KEEP)}",
        "--ntasks-per-node=1",
    ]
    assert second["nodelist"] == ",".join(KEEP)
    assert second["ntasks"] is None  # the old allocation's task count would start 3 tasks
    record = next(r for r in dicts(Ledger(folder)) if r["event"] == "in_place")
    assert record["released"] == ["gpu-preemptible-dp-2"] and record["attempt"] == 0
    assert any("released gpu-preemptible-dp-2" in s for s in said)


def test_a_step_that_does_not_end_after_the_request_is_ended(tmp_path: Path) -> None:
    env, folder, log = setup(tmp_path, STEPS_ASK="1", STEPS_HANG="1")
    started = time.monotonic()
    code, said, _slurm = steps(tmp_path, env, folder, Slurm(), "--grace=0.5")
    assert time.monotonic() - started < 60
    assert code == 0  # the second step's
    assert [r["in_place"] for r in lines(log)] == ["0", "1"]
    assert any("ending the step" in s for s in said)


def test_when_the_release_fails_the_job_is_requeued(tmp_path: Path) -> None:
    env, folder, log = setup(tmp_path, STEPS_ASK="1")
    _code, said, slurm = steps(tmp_path, env, folder, Slurm(resize_fails=True))
    assert slurm.requeued == ["77"]
    assert len(lines(log)) == 1
    events = [r["event"] for r in dicts(Ledger(folder))]
    assert events == ["in_place_failed", "requeued"]
    assert any("requeuing instead" in s for s in said)


def test_a_leftover_request_of_another_attempt_is_not_taken(tmp_path: Path) -> None:
    env, folder, log = setup(tmp_path, SLURM_RESTART_COUNT="1")
    write_request(
        FolderLayout(folder).in_place_request("77", "0"), Request(KEEP, ("x",), "old", 0.0)
    )
    _code, _said, slurm = steps(tmp_path, env, folder, Slurm())
    assert slurm.resized == [] and len(lines(log)) == 1


def test_another_launcher_than_srun_never_restarts_in_place(tmp_path: Path) -> None:
    env, folder, _log = setup(tmp_path, STEPS_ASK="1")
    mpirun = tmp_path / "mpirun"
    mpirun.symlink_to(tmp_path / "srun")
    opts = parse_args([f"--checkpoint-dir={folder}", "--", str(mpirun)])
    slurm = Slurm()
    Steps(opts, read_job_env(env), env, slurm).run()
    assert slurm.resized == []


def test_step_argv_and_resized_env() -> None:
    assert step_argv(["srun", "-x"], None) == ["srun", "-x"]
    pinned = ["srun", "--nodes=1", "--ntasks=1", "--nodelist=a", "-x"]
    assert step_argv(["srun", "-x"], ("a",)) == pinned
    env = resized_env(
        {"SLURM_NTASKS": "3", "SLURM_TASKS_PER_NODE": "1(x3)", "KEEP": "1"},
        {"SLURM_JOB_NODELIST": "a", "SLURM_TASKS_PER_NODE": None},
    )
    assert env == {"KEEP": "1", "SLURM_JOB_NODELIST": "a"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--checkpoint-dir=x"], "give the srun command after --"),
        (["--checkpoint-dir=x", "--"], "no srun command after --"),
        (["--checkpoint-dir=x", "--grace=-1", "--", "srun"], "--grace must be from 0 to 3600"),
    ],
)
def test_bad_arguments_are_one_line(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_args(argv)


# -- hot spares (--spares): steps on part of the job ----------------------------------------
FOUR = "gpu-preemptible-dp-[1-4]"

# A stand-in srun for a job with spares: logs its argv; in the first step it asks, as the
# watcher would, for the drained spare dp-4 to be released, waits (on the ledger, not on a
# clock) until the supervisor says it was, then asks for an in-place restart with the
# spare dp-1 in place of the drained dp-3.
SPARE_SRUN = r"""
import json, os, sys, time
log, folder = os.environ["STEPS_LOG"], os.environ["STEPS_FOLDER"]
with open(log, "a") as fh:
    fh.write(json.dumps({"argv": sys.argv[1:], "in_place": os.environ["SLURMPRE_IN_PLACE"],
        "nodelist": os.environ["SLURM_JOB_NODELIST"]}) + "\n")
if os.environ["SLURMPRE_IN_PLACE"] == "0":
    meta = os.path.join(folder, ".slurmpre")
    def put(name, data):
        with open(os.path.join(meta, name + ".tmp"), "w") as fh:
            json.dump(data, fh)
        os.rename(os.path.join(meta, name + ".tmp"), os.path.join(meta, name))
    put("spares-77-0.json", {"release": ["gpu-preemptible-dp-4"]})
    ledger = os.path.join(meta, "attempts.jsonl")
    end = time.monotonic() + 60
    while time.monotonic() < end:
        if os.path.exists(ledger) and "spare_released" in open(ledger).read():
            break
        time.sleep(0.05)
    else:
        sys.exit(9)  # the supervisor never released the spare
    put("in-place-77-0.json", {"keep": ["gpu-preemptible-dp-2", "gpu-preemptible-dp-1"],
        "release": ["gpu-preemptible-dp-3", "gpu-preemptible-dp-4"], "why": "test",
        "at": time.time(), "spares_in": ["gpu-preemptible-dp-1"]})
sys.exit(0)
"""


def test_first_spares_are_the_batch_host_then_the_last_nodes() -> None:
    from slurmpre.job.handover.steps import first_spares

    nodes = [f"n{i}" for i in range(1, 6)]
    assert first_spares(nodes, "n1", 0) == ()
    assert first_spares(nodes, "n1", 1) == ("n1",)
    assert first_spares(nodes, "n1", 2) == ("n1", "n5")
    assert first_spares(nodes, "n3", 3) == ("n3", "n4", "n5")
    assert first_spares(["n1", "n2"], "n1", 5) == ("n1",)  # one node trains, at least
    assert first_spares(["n1"], "n1", 1) == ()


def test_with_spares_the_step_trains_on_the_rest_and_a_spare_swaps_in_place(
    tmp_path: Path,
) -> None:
    env, folder, log = setup(
        tmp_path, SLURM_JOB_NODELIST=FOUR, SLURM_NTASKS="4", STEPS_FOLDER=str(tmp_path / "ckpt")
    )
    (tmp_path / "srun").write_text(f"#!{sys.executable}\n{SPARE_SRUN}")
    code, said, slurm = steps(tmp_path, env, folder, Slurm(), "--spares=2")
    assert code == 0
    first, second = lines(log)
    # dp-1 (the batch host) and dp-4 are held; dp-2 and dp-3 train.
    assert first["argv"][:3] == [
        "--nodes=2",
        "--ntasks=2",
        "--nodelist=gpu-preemptible-dp-2,gpu-preemptible-dp-3",
    ]
    # The drained spare is released while the step runs, then the swap keeps two nodes.
    assert slurm.resized == [
        ("77", ("gpu-preemptible-dp-1", "gpu-preemptible-dp-2", "gpu-preemptible-dp-3")),
        ("77", ("gpu-preemptible-dp-1", "gpu-preemptible-dp-2")),
    ]
    assert second["argv"][:3] == [
        "--nodes=2",
        "--ntasks=2",
        "--nodelist=gpu-preemptible-dp-2,gpu-preemptible-dp-1",
    ]
    assert second["nodelist"] == "gpu-preemptible-dp-1,gpu-preemptible-dp-2"
    events = {r["event"]: r for r in dicts(Ledger(folder))}
    assert events["spare_released"]["released"] == ["gpu-preemptible-dp-4"]
    assert events["in_place"]["spares_in"] == ["gpu-preemptible-dp-1"]
    # dp-4, asked again, was released already: the record names what this release took.
    assert events["in_place"]["released"] == ["gpu-preemptible-dp-3"]
    assert any("released drained spare gpu-preemptible-dp-4" in s for s in said)


def test_a_spare_slurm_will_not_release_is_asked_once_and_recorded(tmp_path: Path) -> None:
    env, folder, _log = setup(
        tmp_path, SLURM_JOB_NODELIST=FOUR, STEPS_FOLDER=str(tmp_path / "ckpt")
    )
    (tmp_path / "srun").write_text(f"#!{sys.executable}\n{SPARE_SRUN}")
    code, said, _slurm = steps(tmp_path, env, folder, Slurm(resize_fails=True), "--spares=2")
    records = [r for r in dicts(Ledger(folder)) if r["event"] == "spare_released"]
    assert len(records) == 1 and records[0]["error"].startswith("command failed")
    assert sum("cannot release spare" in s for s in said) == 1
    # The in-place release after it fails too: Slurm's requeue, as without spares.
    assert code == 0


@pytest.mark.parametrize("bad", ["-1", "65"])
def test_a_spare_count_out_of_range_is_one_usage_error(tmp_path: Path, bad: str) -> None:
    with pytest.raises(UsageError, match=f"--spares must be from 0 to 64, got {bad}"):
        parse_args([f"--checkpoint-dir={tmp_path}", f"--spares={bad}", "--", "srun"])


def test_a_request_with_nothing_to_keep_ends_the_step_and_starts_none(tmp_path: Path) -> None:
    """The watcher's ask when the job hands over to another: the step is ended (here it
    would hang for ever), nothing is released, no step follows, and the job ends 0."""
    env, folder, log = setup(tmp_path, STEPS_ASK="1", STEPS_HANG="1", STEPS_KEEP="[]")
    code, said, slurm = steps(tmp_path, env, folder, Slurm())
    assert code == 0
    assert slurm.resized == [] and slurm.requeued == []
    assert len(lines(log)) == 1
    assert any(s.startswith("the step ended as asked") for s in said)


# -- make before break in place (`overlap`): the next step starts beside this one ----------
# A stand-in srun: the first step asks, as the watcher would, for the next step to start
# early (dp-1, a spare, in place of the drained dp-3), waits (on a file, not on a clock)
# until that step has started, then asks for the in-place restart and ends. The early step
# waits until the supervisor has recorded the release, then ends.
EARLY_SRUN = r"""
import json, os, sys, time
log, folder = os.environ["STEPS_LOG"], os.environ["STEPS_FOLDER"]
meta = os.path.join(folder, ".slurmpre")
with open(log, "a") as fh:
    fh.write(json.dumps({"argv": sys.argv[1:], "in_place": os.environ["SLURMPRE_IN_PLACE"],
        "releasing": os.environ.get("SLURMPRE_RELEASING")}) + "\n")
def put(name, data):
    with open(os.path.join(meta, name + ".tmp"), "w") as fh:
        json.dump(data, fh)
    os.rename(os.path.join(meta, name + ".tmp"), os.path.join(meta, name))
def wait(found):
    end = time.monotonic() + 60
    while time.monotonic() < end:
        if found():
            return
        time.sleep(0.05)
    sys.exit(9)
ask = {"keep": ["gpu-preemptible-dp-2", "gpu-preemptible-dp-1"],
       "release": ["gpu-preemptible-dp-3"], "why": "test", "at": time.time(),
       "spares_in": ["gpu-preemptible-dp-1"]}
started = os.path.join(folder, "early-started")
if os.environ["SLURMPRE_IN_PLACE"] == "0":
    put("in-place-77-0.json", {**ask, "early": True})
    wait(lambda: os.path.exists(started))
    put("in-place-77-0.json", ask)
    time.sleep(0 if os.environ.get("STEPS_LATE") is None else 600)  # ended by the request
else:
    import signal
    def ended(*_):
        open(os.path.join(folder, "early-ended"), "w").close()
        sys.exit(15)
    signal.signal(signal.SIGTERM, ended)
    open(started, "w").close()
    ledger = os.path.join(meta, "attempts.jsonl")
    wait(lambda: os.path.exists(ledger) and '"in_place"' in open(ledger).read())
sys.exit(0)
"""


@pytest.mark.parametrize("late", [False, True], ids=["ends-by-itself", "ended-by-request"])
def test_an_early_request_starts_the_next_step_beside_this_one_which_then_takes_over(
    tmp_path: Path, late: bool
) -> None:
    """The next step starts (``--overlap``, one in-place restart on, the drained node named)
    while this one runs; once this one has ended and the drained node is released, that
    step goes on as the job's step: no third step is started."""
    extra = {"STEPS_LATE": "1"} if late else {}
    env, folder, log = setup(
        tmp_path,
        SLURM_JOB_NODELIST=FOUR,
        SLURM_NTASKS="4",
        STEPS_FOLDER=str(tmp_path / "ckpt"),
        **extra,
    )
    (tmp_path / "srun").write_text(f"#!{sys.executable}\n{EARLY_SRUN}")
    code, said, slurm = steps(tmp_path, env, folder, Slurm(), "--spares=2")
    assert code == 0, said
    first, second = lines(log)  # the early step took over: no third
    assert "--overlap" not in first["argv"] and first["releasing"] is None
    assert second["argv"][:4] == [
        "--nodes=2",
        "--ntasks=2",
        "--nodelist=gpu-preemptible-dp-2,gpu-preemptible-dp-1",
        "--overlap",
    ]
    assert (second["in_place"], second["releasing"]) == ("1", "gpu-preemptible-dp-3")
    assert slurm.resized == [
        ("77", ("gpu-preemptible-dp-1", "gpu-preemptible-dp-2", "gpu-preemptible-dp-4"))
    ]
    (swap,) = [r for r in dicts(Ledger(folder)) if r["event"] == "in_place"]
    assert swap["released"] == ["gpu-preemptible-dp-3"] and swap.get("in_place", 0) == 0
    assert any("beside this one" in s for s in said)


def test_a_step_started_early_that_will_not_take_over_is_ended(tmp_path: Path) -> None:
    """The step asked early, then the request turned into a hand-over (nothing kept): the
    early step (here it would wait for ever) is ended with it, and none follows."""
    env, folder, log = setup(
        tmp_path, SLURM_JOB_NODELIST=FOUR, SLURM_NTASKS="4", STEPS_FOLDER=str(tmp_path / "ckpt")
    )
    script = EARLY_SRUN.replace('put("in-place-77-0.json", ask)', 'put("in-place-77-0.json", '
                                '{**ask, "keep": [], "release": []})')  # fmt: skip
    (tmp_path / "srun").write_text(f"#!{sys.executable}\n{script}")
    code, said, slurm = steps(tmp_path, env, folder, Slurm(), "--spares=2")
    assert code == 0, said
    assert len(lines(log)) == 2 and slurm.resized == []
    assert (folder / "early-ended").exists()  # ended by the supervisor, not by its own wait


def test_the_supervisors_lines_are_its_own_on_its_standard_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the steps' supervisor says reaches the job's log as its lines always did: its
    prefix, on its standard error (`main` sends them there)."""
    from slurmpre.job.handover import steps as module

    env, folder, _log = setup(tmp_path, STEPS_ASK="1")
    monkeypatch.setattr(module, "CommandLineSlurm", Slurm)
    argv = ["steps", f"--checkpoint-dir={folder}", "--", str(tmp_path / "srun")]
    assert module.main(argv, env) == 0
    out, err = capsys.readouterr()
    said = [s for s in err.splitlines() if s.startswith("slurmpre[steps]: ")]
    assert any("released gpu-preemptible-dp-2" in s for s in said), err
    assert "released" not in out
