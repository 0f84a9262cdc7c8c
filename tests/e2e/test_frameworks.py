"""The Hugging Face Trainer and Lightning under slurmpre, preempted the provider's way.

Both jobs run at once on the sandbox's two preemptible nodes (one CPU each), each
with its integration's callback (tests/e2e/hf_job.py, tests/e2e/lightning_job.py),
and each holds at its own random step of the first attempt until the notice is
there, so the drain lands mid-training, not after it. One node is drained with a
60 s window: each job must requeue within 15 s of its framework's own save, long
before the window closes, resume from that save with no optimizer step lost, and
end with the weights of an uninterrupted run, bit for bit.

The uninterrupted runs train at the same time, outside Slurm: the same script under
``torchrun --standalone`` with two processes, the same world size (the sandbox's
nodes are this machine too, so gloo adds up the same numbers in the same order).

The node is removed once both jobs have left it rather than at T+60 (``once_empty``):
nothing of theirs is on it by then (the removal ends no job and kills no process,
which the test checks), and it comes back as the replacement on which the two-node
jobs restart. Waiting out the window would change nothing but the test's length.
"""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.sandbox.preempt import PreemptPlan
from slurmpre.slurm.client import CommandLineSlurm

from tests.conftest import PREEMPTIBLE, slurmpre_cli, wait_for, wait_preemptible_idle
from tests.e2e.helpers import (
    Preemption,
    jsonl,
    ledger,
    logs,
    restore_all,
    successor_of,
    wait_done,
    write_spec,
)

pytestmark = [pytest.mark.sandbox, pytest.mark.e2e]

HERE = Path(__file__).parent
WINDOW = 60
STEPS = 30  # both scripts' max_steps
# One thread per process, no hub: for the jobs (the spec's [env]) and the references alike.
QUIET = {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


class Job:
    def __init__(self, kind: str, script: str, folder: Path, hold_at: int, nodes: int = 2) -> None:
        self.kind, self.folder, self.hold_at, self.nodes = kind, folder, hold_at, nodes
        self.script = HERE / script
        folder.mkdir()
        self.ckpt = folder / "ckpt"
        self.reference = folder / "reference"
        self.job_id = ""

    def submit(
        self, args: tuple[str, ...] = (), lines: tuple[str, ...] = (), window: int = WINDOW
    ) -> None:
        command = [sys.executable, str(self.script), "--hold-at", str(self.hold_at), *args]
        spec = write_spec(
            self.folder,
            self.kind,
            command,
            ["cpus_per_task = 1", f"preempt_window = {window}", *lines],
            [f'{k} = "{v}"' for k, v in QUIET.items()],
            nodes=str(self.nodes),
        )
        self.job_id = slurmpre_cli("submit", str(spec), check=True).stdout.strip()

    def start_reference(self) -> subprocess.Popen[bytes]:
        """The same script uninterrupted, outside Slurm, with the job's world size."""
        self.reference.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")} | QUIET
        argv = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        argv += ["--nproc-per-node", str(self.nodes), str(self.script)]
        argv += ["--out", str(self.reference)]
        with (self.reference / "out.log").open("wb") as out:
            return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)

    def records(self, event: str) -> list[dict[str, Any]]:
        return [r for r in ledger(self.folder) if r["event"] == event]


def same_weights(a: Path, b: Path) -> bool:
    import torch

    x, y = torch.load(a), torch.load(b)
    return bool(x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x))


def test_trainer_and_lightning_requeue_after_their_own_save_and_end_identical(
    sandbox: Sandbox, tmp_path: Path, rng: random.Random
) -> None:
    pytest.importorskip("transformers", reason="the e2e extra (transformers) is not installed")
    pytest.importorskip("lightning", reason="the e2e extra (lightning) is not installed")
    jobs = [
        Job("hf", "hf_job.py", tmp_path / "hf", rng.randint(3, STEPS - 8)),
        Job("lightning", "lightning_job.py", tmp_path / "lightning", rng.randint(3, STEPS - 8)),
    ]
    slurm = CommandLineSlurm()
    wait_preemptible_idle(slurm)
    references = [job.start_reference() for job in jobs]
    try:
        for job in jobs:
            job.submit()
        for job in jobs:
            wait_for(
                f"the {job.kind} job to hold at step {job.hold_at}",
                (job.ckpt / "holding").exists,
                timeout=240,
            )
        nodes = slurm.job(jobs[0].job_id).nodes
        assert sorted(nodes) == sorted(slurm.job(jobs[1].job_id).nodes)
        victim = rng.choice(nodes)
        print(f"drain {victim}; the jobs hold at steps {[j.hold_at for j in jobs]}")
        plan = PreemptPlan(victim, window=WINDOW, return_after=1, once_empty=True)
        preemption = Preemption(sandbox, plan)
        preemption.start()
        for job in jobs:
            wait_done(slurm, job.job_id, job.folder, timeout=300)
        drain, removal, _ = preemption.finish()
    finally:
        restore_all(sandbox)
        for proc in references:
            try:
                proc.wait(timeout=300)
            except subprocess.TimeoutExpired:
                proc.kill()
    for job, proc in zip(jobs, references, strict=True):
        out = (job.reference / "out.log").read_text(errors="replace")
        assert proc.returncode == 0, f"the uninterrupted {job.kind} run failed:\n{out[-4000:]}"
    # Both jobs had left the node when it was removed: the removal ended nothing.
    assert "and 0 job process(es) killed" in removal.what, removal
    assert "jobs it ended: none" in removal.what, removal
    for job in jobs:
        check(job, victim, drain.at)


def check(job: Job, victim: str, drained_at: float) -> None:
    where = f"{job.kind} job {job.job_id}:\n{logs(job.folder)[-6000:]}"
    (notice,) = job.records("notice")
    assert notice["node"] == victim, where
    # The framework's own save on the notice, reported by the callback.
    saves = [r for r in job.records("checkpoint") if r["after_notice"]]
    assert len(saves) == 1, where
    save = saves[0]
    (requeued,) = job.records("requeued")
    assert requeued["requeued_at"] - save["time"] <= 15, (save, requeued)
    assert requeued["requeued_at"] < drained_at + WINDOW, (drained_at, requeued)
    # The second attempt resumed from exactly that save, at its step: none lost.
    starts = job.records("start")
    assert [s["attempt"] for s in starts] == [0, 1], where
    assert starts[1]["resume_from"] == save["path"], (starts[1], save)
    assert starts[1]["step"] == save["step"] == job.hold_at, (starts[1], save)
    progress = jsonl(job.ckpt / "progress.jsonl")
    assert [(p["attempt"], p["started_at_step"]) for p in progress] == [
        (0, 0),
        (1, save["step"]),
    ], where
    assert same_weights(job.ckpt / "final.pt", job.reference / "final.pt"), (
        f"{job.kind}: the final weights differ from the uninterrupted run's"
    )
    print(
        f"{job.kind}: held at step {job.hold_at}, saved step {save['step']} "
        f"({Path(save['path']).name}), requeued {requeued['requeued_at'] - save['time']:.1f} s "
        f"after the save, {requeued['requeued_at'] - drained_at:.1f} s after the drain"
    )


def test_the_trainer_trains_on_after_its_notice_save_until_the_deadline_then_hands_over(
    sandbox: Sandbox, tmp_path: Path, rng: random.Random
) -> None:
    """The HF Trainer with slurmpre's callback, one node, no free node for its successor:
    it saves on the notice and trains on (the callback asks checkpoint_requested()),
    saves again and stops as its deadline nears, and the successor (pending until a
    node returns) resumes from that last save; no step lost, the uninterrupted run's
    weights bit for bit."""
    pytest.importorskip("transformers", reason="the e2e extra (transformers) is not installed")
    # The deadline: 35 - 12 (margin) - the notice save's time; a step a second. The margin
    # leaves the Trainer's last save and its exit time on a loaded machine (with 25 and 5
    # it ended after the node was removed: NODE_FAIL, with the suite's sandboxes beside it).
    window = 35
    job = Job("hf-goes-on", "hf_job.py", tmp_path / "hf", rng.randint(3, 8), nodes=1)
    slurm = CommandLineSlurm()
    wait_preemptible_idle(slurm)
    reference = job.start_reference()
    blocker = None
    try:
        job.submit(
            ("--hold", "notice", "--step-seconds", "1"),
            ('restart = "successor"', "poll_interval = 1", "safety_margin = 12"),
            window=window,
        )
        job_id = job.job_id
        wait_for(f"step {job.hold_at}", (job.ckpt / "holding").exists, timeout=240)
        (victim,) = slurm.job(job_id).nodes
        (other,) = [n.name for n in slurm.nodes(PREEMPTIBLE) if n.name != victim]
        blocker = slurm.submit(
            "#!/bin/bash\nsleep 600\n",
            args=[f"--nodelist={other}", "--exclusive", "--job-name=blocker"],
        )
        wait_for("the blocker to run", lambda: slurm.job(blocker).state == "RUNNING", timeout=60)
        print(f"drain {victim} at step {job.hold_at}; {other} is taken")
        preemption = Preemption(
            sandbox, PreemptPlan(victim, window=window, return_after=3, once_empty=True)
        )
        preemption.start()
        successor = str(wait_for("the hand-over", lambda: successor_of(job.folder), timeout=90))
        wait_for(f"job {job_id} to end", lambda: slurm.job(job_id).finished, timeout=120)
        assert slurm.job(job_id).state == "COMPLETED", logs(job.folder)[-6000:]
        assert slurm.job(successor).state == "PENDING"  # no node for it yet
        slurm.cancel(blocker)  # a node returns
        wait_done(slurm, successor, job.folder, timeout=300)
        drain, _, _ = preemption.finish()
    finally:
        if blocker is not None:
            with contextlib.suppress(Exception):
                slurm.cancel(blocker)
        restore_all(sandbox)
        try:
            reference.wait(timeout=300)
        except subprocess.TimeoutExpired:
            reference.kill()
    out = (job.reference / "out.log").read_text(errors="replace")
    assert reference.returncode == 0, f"the uninterrupted run failed:\n{out[-4000:]}"
    where = f"job {job_id} -> {successor}:\n{logs(job.folder)[-6000:]}"
    # The notice's save, any periodic ones (every 10 steps), and the last at the deadline.
    saves = [r for r in job.records("checkpoint") if r["job"] == job_id and r["after_notice"]]
    notice_save, last = saves[0], saves[-1]
    assert job.hold_at <= notice_save["step"] <= job.hold_at + 2, where
    assert last["step"] >= notice_save["step"] + 5, where  # it trained on in between
    (stopping,) = [r for r in job.records("stopping") if r["job"] == job_id]
    assert stopping["why"] == "the deadline nears", stopping
    assert last["time"] < drain.at + window, (drain.at, last)
    starts = [r for r in job.records("start") if r["job"] == successor]
    assert [s["resume_from"] for s in starts] == [last["path"]], where
    progress = jsonl(job.ckpt / "progress.jsonl")
    assert [(p["attempt"], p["started_at_step"]) for p in progress] == [
        (0, 0),
        (1, last["step"]),  # the successor goes on from the last save: no step lost
    ], where
    assert same_weights(job.ckpt / "final.pt", job.reference / "final.pt"), (
        "the final weights differ from the uninterrupted run's"
    )
    print(
        f"HF Trainer, no free node (tuned): notice save at step {notice_save['step']} "
        f"{notice_save['time'] - drain.at:.1f} s after the drain, trained on to step "
        f"{last['step']} ({last['time'] - drain.at:.1f} s); training time lost per "
        f"preemption: {progress[1]['t'] - last['time']:.1f} s (last save to the successor's "
        "training), of which the wait for a node is most"
    )


def test_the_trainers_own_jit_save_with_zero_lines_resumes_but_computes_a_step_twice(
    sandbox: Sandbox, tmp_path: Path, rng: random.Random
) -> None:
    """The zero-line recipe (examples/hf-trainer-jit.toml): no slurmpre line in the
    script; the Trainer's enable_jit_checkpoint saves on the SIGTERM slurmpre relays to
    its worker at the notice (notice_signal = "TERM"), and the successor gets the path
    as --resume_from_checkpoint. It resumes from that save, but what the recipe cannot
    promise shows too: the Trainer waits 3 s after the signal, then saves from inside
    the step it is computing (on_pre_optimizer_step), so that step is computed again
    after the restart, from the random state its first computation left: with dropout
    on, the final weights are not the uninterrupted run's."""
    pytest.importorskip("transformers", reason="the e2e extra (transformers) is not installed")
    job = Job("hf-jit", "hf_job.py", tmp_path / "hf", rng.randint(3, 8), nodes=1)
    slurm = CommandLineSlurm()
    wait_preemptible_idle(slurm)
    reference = job.start_reference()
    try:
        job.submit(
            ("--jit", "--step-seconds", "1"),
            ('notice_signal = "TERM"', 'resume_arg = "--resume_from_checkpoint"',
             'restart = "successor"', "poll_interval = 1"),
        )  # fmt: skip
        wait_for(f"the job to hold at step {job.hold_at}", (job.ckpt / "holding").exists, 240)
        (victim,) = slurm.job(job.job_id).nodes
        plan = PreemptPlan(victim, window=WINDOW, return_after=3, once_empty=True)
        preemption = Preemption(sandbox, plan)
        preemption.start()
        successor = wait_for("the hand-over", lambda: successor_of(job.folder), timeout=120)
        wait_done(slurm, successor, job.folder, timeout=300)
        drain, _, _ = preemption.finish()
    finally:
        restore_all(sandbox)
        try:
            reference.wait(timeout=300)
        except subprocess.TimeoutExpired:
            reference.kill()
    assert reference.returncode == 0, (job.reference / "out.log").read_text()[-4000:]
    where = logs(job.folder)[-6000:]
    (committed,) = job.records("committed")  # the watcher saw the Trainer's own save
    save_step = committed["step"]
    assert Path(committed["path"]).name == f"checkpoint-{save_step}", committed
    assert save_step == job.hold_at, (committed, job.hold_at)  # inside the held step
    starts = job.records("start")
    assert [s["job"] for s in starts] == [job.job_id, successor], where
    assert starts[1]["resume_from"] == committed["path"], (starts[1], committed)
    steps = jsonl(job.ckpt / "steps.jsonl")
    first = [s["step"] for s in steps if s["run"] == 0]
    second = [s["step"] for s in steps if s["run"] == 1]
    assert second == list(range(save_step, STEPS)), where  # resumed at its save
    assert first[-1] == save_step, (first, save_step)  # ... begun before the save, again after
    assert not same_weights(job.ckpt / "final.pt", job.reference / "final.pt"), (
        "the recipe's repeated step left the weights identical: dropout is on, so the "
        "test's premise no longer holds"
    )
    print(
        f"HF Trainer JIT recipe (tuned): held at step {job.hold_at}; the Trainer saved "
        f"checkpoint-{save_step} {committed['committed_seen_at'] - drain.at:.1f} s after the "
        f"drain, from inside step {save_step}, which ran again in job {successor}; final "
        "weights differ from the uninterrupted run's (dropout on)"
    )


def test_lightnings_own_requeue_signal_with_zero_lines_saves_and_resumes(
    sandbox: Sandbox, tmp_path: Path, rng: random.Random
) -> None:
    """The zero-line recipe for Lightning (examples/lightning-requeue-signal.toml): no
    slurmpre line in the script; SLURMEnvironment(requeue_signal=SIGUSR1) saves
    hpc_ckpt_N.ckpt when slurmpre relays the notice as SIGUSR1 (notice_signal) and runs
    `scontrol requeue` itself; the successor slurmpre submitted at the notice takes
    over, the requeued predecessor ends at once, and Lightning resumes from its own
    save, which slurmpre counts as the run's progress (no stalled restarts)."""
    pytest.importorskip("lightning", reason="the e2e extra (lightning) is not installed")
    job = Job("lightning-usr1", "lightning_job.py", tmp_path / "l", rng.randint(3, 8), nodes=1)
    slurm = CommandLineSlurm()
    wait_preemptible_idle(slurm)
    try:
        job.submit(
            ("--requeue-signal", "--hold", "notice", "--step-seconds", "0.5"),
            ('launcher = "plain"', 'notice_signal = "USR1"', 'restart = "successor"',
             "poll_interval = 1"),
        )  # fmt: skip
        wait_for(f"the job to hold at step {job.hold_at}", (job.ckpt / "holding").exists, 240)
        (victim,) = slurm.job(job.job_id).nodes
        plan = PreemptPlan(victim, window=WINDOW, return_after=3, once_empty=True)
        preemption = Preemption(sandbox, plan)
        preemption.start()
        successor = wait_for("the hand-over", lambda: successor_of(job.folder), timeout=120)
        wait_done(slurm, successor, job.folder, timeout=300)
        wait_for(
            f"job {job.job_id}, requeued by Lightning, to end",
            lambda: slurm.job(job.job_id).finished,
            timeout=300,
        )
        preemption.finish()
    finally:
        restore_all(sandbox)
    where = logs(job.folder)[-6000:]
    assert (job.ckpt / "hpc_ckpt_1.ckpt").is_file(), where  # Lightning's own save
    progress = jsonl(job.ckpt / "progress.jsonl")
    assert [p["attempt"] for p in progress] == [0, 1], where
    resumed_at = progress[1]["started_at_step"]
    assert resumed_at >= job.hold_at, (progress, job.hold_at)  # from its save, not from 0
    assert (job.ckpt / "final.pt").is_file(), where  # trained to its end
    starts = job.records("start")
    assert starts[-1]["job"] == successor, where
    assert Path(starts[-1]["resume_from"]).name == "hpc_ckpt_1.ckpt", starts[-1]
    assert not job.records("gave_up"), where
    print(
        f"Lightning requeue_signal recipe (tuned): held at step {job.hold_at}, saved "
        f"hpc_ckpt_1.ckpt, job {successor} resumed at step {resumed_at}"
    )
