"""A tiny, bit-for-bit deterministic training run for the end-to-end tests.

Linear regression with hand-written SGD + momentum, data generated from the
step number (so it does not depend on who trains it), gradients summed with
all_reduce over gloo, checkpoints saved with torch.distributed.checkpoint
through slurmpre's atomic commit helper. Rank 0 reports progress and, at the
end, the final weights.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import slurmpre
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from slurmpre.api.attempt import own_files

DIM = 16
GLOBAL_BATCH = 32
# The batch is cut into this many fixed shards; each rank computes the gradients of
# the shards it owns, and the sum runs over shards in one order whatever the world
# size, so a run that loses a node midway ends bit for bit as one that did not.
SHARDS = 4


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(GLOBAL_BATCH, DIM, generator=g, dtype=torch.float64)
    w_true = torch.linspace(-1, 1, DIM, dtype=torch.float64)
    y = x @ w_true + 0.01 * torch.randn(GLOBAL_BATCH, generator=g, dtype=torch.float64)
    return x, y


def hold_for_the_notice(out: Path, rank: int, timeout: float = 300) -> None:
    if rank == 0:
        (out / "holding").write_text(str(time.time()))
    files = own_files(os.environ)  # the file itself: asking slurmpre would mark listening
    assert files is not None, "run under slurmpre's wrapper"
    notice = files.notice
    deadline = time.monotonic() + timeout
    while not notice.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"no notice within {timeout:g} s")
        time.sleep(0.1)


def hold_until_agreed(out: Path, rank: int, timeout: float = 300) -> None:
    """`hold_for_the_notice`, then every rank asks slurmpre until all agree on the notice
    (a few calls of one all_reduce each), so the step the notice is taken at is this one,
    not a later one the notice gate happens to sync at."""
    hold_for_the_notice(out, rank, timeout)
    deadline = time.monotonic() + timeout
    while not slurmpre.preemption_requested():
        if time.monotonic() > deadline:
            raise SystemExit(f"the ranks did not agree on the notice within {timeout:g} s")


def framework_job_args() -> argparse.Namespace:
    """hf_job.py's and lightning_job.py's options: where to write, the step to hold at,
    and how (until the ranks agree on the notice, or only until its file is there: a
    script that goes on must not ask `preemption_requested()` for it), and a pace."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.environ.get("SLURMPRE_CHECKPOINT_DIR"))
    parser.add_argument("--hold-at", type=int, default=-1)
    parser.add_argument("--hold", choices=("agreed", "notice"), default="agreed")
    parser.add_argument("--step-seconds", type=float, default=0.0, help="a sleep per step")
    # The zero-line recipe (hf_job.py): the Trainer's own SIGTERM save, no slurmpre callback.
    parser.add_argument("--jit", action="store_true")
    parser.add_argument("--resume_from_checkpoint", default=None)
    # ... and Lightning's: SLURMEnvironment's save and requeue on SIGUSR1.
    parser.add_argument("--requeue-signal", action="store_true")
    return parser.parse_args()


def hold(how: str, out: Path, rank: int) -> None:
    """`framework_job_args`'s ``--hold``."""
    if how == "agreed":
        hold_until_agreed(out, rank)
    else:
        hold_for_the_notice(out, rank)


def report_start(out: Path, step: int) -> None:
    """One line per attempt, from rank 0: the step its training starts at, and when."""
    line = {"attempt": slurmpre.restart_count(), "started_at_step": step, "t": time.time()}
    with (out / "progress.jsonl").open("a") as f:
        f.write(json.dumps(line) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--every", type=int, default=5)
    parser.add_argument("--step-seconds", type=float, default=0.25)
    parser.add_argument("--slow-checkpoint-at", type=int, default=-1)
    parser.add_argument("--slow-seconds", type=float, default=30.0)
    parser.add_argument(
        "--naive-resume",
        action="store_true",
        help="the seeds' recipe: after a restart, load the highest-numbered step folder, "
        "complete or not (for the side-by-side benchmark)",
    )
    parser.add_argument("--work-ms", type=float, default=0.0, help="busy compute per step")
    parser.add_argument(
        "--hold-at",
        type=int,
        default=-1,
        help="in the first attempt, wait at this step until the notice file exists, so a test "
        "can preempt at a chosen step without racing the watcher's poll against the training",
    )
    parser.add_argument(
        "--honor-notice",
        action="store_true",
        help="ask slurmpre.preemption_requested() every step; checkpoint and stop on a notice",
    )
    parser.add_argument(
        "--go-on",
        action="store_true",
        help="with --honor-notice: also ask slurmpre.checkpoint_requested(), save on the "
        "notice and train on until preemption_requested() says stop",
    )
    args = parser.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    out = slurmpre.checkpoint_dir()

    torch.manual_seed(0)
    state = {
        "w": torch.zeros(DIM, dtype=torch.float64),
        "momentum": torch.zeros(DIM, dtype=torch.float64),
        "step": torch.zeros((), dtype=torch.int64),
    }
    resume = slurmpre.resume_path()
    if args.naive_resume:
        restarts = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
        folders = sorted(out.glob("step-*"))
        resume = folders[-1] if restarts > 0 and folders else None
    if resume is not None:
        dcp.load(state, checkpoint_id=str(resume))
    start = int(state["step"])
    if rank == 0:
        with (out / "progress.jsonl").open("a") as fh:
            fh.write(
                json.dumps(
                    {
                        "attempt": slurmpre.restart_count(),
                        "in_place": int(os.environ.get("SLURMPRE_IN_PLACE") or 0),
                        "resumed_step": start,
                        "resume_path": None if resume is None else str(resume),
                        "world": world,
                        "slurmpre_world": slurmpre.world_size(),
                        "previous_world": slurmpre.previous_world_size(),
                        "started_at": time.time(),
                    }
                )
                + "\n"
            )

    for step in range(start, args.steps):
        if step == args.hold_at and resume is None:  # the first attempt, of a chain too
            hold_for_the_notice(out, rank)
        saved_now = False
        if args.go_on and slurmpre.checkpoint_requested():
            # The notice checkpoint: saved at once, and the training goes on.
            with slurmpre.checkpoint(step) as path:
                dcp.save(state, checkpoint_id=str(path))
            saved_now = True
            if rank == 0:
                with (out / "notice-checkpoints.jsonl").open("a") as fh:
                    fh.write(json.dumps({"job": os.environ.get("SLURM_JOB_ID"), "step": step,
                                         "at": time.time()}) + "\n")  # fmt: skip
        if args.honor_notice and slurmpre.preemption_requested():
            # Every rank agrees on this step: save it, record it, and stop;
            # slurmpre requeues the job once the checkpoint has committed.
            if not saved_now:
                with slurmpre.checkpoint(step) as path:
                    dcp.save(state, checkpoint_id=str(path))
            if rank == 0:
                with (out / "notices.jsonl").open("a") as fh:
                    fh.write(
                        json.dumps(
                            {"attempt": slurmpre.restart_count(), "step": step, "at": time.time()}
                        )
                        + "\n"
                    )
            dist.barrier()
            dist.destroy_process_group()
            return
        x, y = batch(step)
        shards = torch.zeros(SHARDS, DIM, dtype=torch.float64)
        for j in range(rank, SHARDS, world):
            err = x[j::SHARDS] @ state["w"] - y[j::SHARDS]
            shards[j] = 2 * x[j::SHARDS].T @ err / GLOBAL_BATCH
        dist.all_reduce(shards)  # each shard is non-zero on one rank only: the sum is exact
        grad = shards[0] + shards[1] + shards[2] + shards[3]
        state["momentum"].mul_(0.9).add_(grad)
        state["w"].sub_(0.05 * state["momentum"])
        state["step"].fill_(step + 1)
        if rank == 0:
            (out / "progress-step").write_text(str(step + 1))
            (out / f"progress-step.attempt-{slurmpre.restart_count()}").write_text(str(step + 1))
        time.sleep(args.step_seconds)
        if args.work_ms:
            busy_until = time.perf_counter() + args.work_ms / 1000
            while time.perf_counter() < busy_until:
                pass
        done = step + 1
        if done % args.every == 0 and done < args.steps:
            with slurmpre.checkpoint(done) as path:
                dcp.save(state, checkpoint_id=str(path))
                if done == args.slow_checkpoint_at and slurmpre.restart_count() == 0:
                    if rank == 0:
                        (out / "writing-checkpoint").write_text(str(done))
                    time.sleep(args.slow_seconds)

    if rank == 0:
        torch.save({"w": state["w"], "step": int(state["step"])}, out / "final.pt")
        (out / "done-at").write_text(str(time.time()))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    main()
