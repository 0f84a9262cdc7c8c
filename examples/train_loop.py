"""The README's training loop, whole and runnable: a plain PyTorch loop (a tiny model,
data-parallel over torch.distributed) with slurmpre's lines, which resumes from the
newest complete checkpoint, saves on the preemption notice and every ``--every``
steps, and trains every step exactly once across preemptions.

A checkpoint named N holds the state after N steps (steps 0 to N-1 done): the notice
saves before training ``step`` (so ``step`` steps are done) and a periodic save after
training it (``step + 1``), and a resume starts at ``slurmpre.resume_step()``.

Runs as is on CPU, under slurmpre's torchrun launcher:
``command = ["python", "examples/train_loop.py"]`` (``--steps``, ``--every``,
``--step-seconds``; ``--log FILE`` appends a line per step trained, for the test).
"""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

import slurmpre

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=2000)
parser.add_argument("--every", type=int, default=500)
parser.add_argument("--step-seconds", type=float, default=0.0)
parser.add_argument("--log", default=None)
args = parser.parse_args()

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
total = args.steps
state = {"w": torch.zeros(8, dtype=torch.float64)}


def train_one_step(step):
    g = torch.Generator().manual_seed(step)  # the data of step `step`, on any world size
    x = torch.randn(world, 8, generator=g, dtype=torch.float64)[rank]
    grad = 2 * (x @ state["w"] - x.sum()) * x
    dist.all_reduce(grad)
    state["w"] -= 0.01 * grad / world
    time.sleep(args.step_seconds)
    if args.log and rank == 0:
        with open(args.log, "a") as f:
            f.write(json.dumps({"step": step, "restart": slurmpre.restart_count()}) + "\n")


# --- the README's loop ---
start = 0
if (path := slurmpre.resume_path()) is not None:  # newest *complete* checkpoint, same on every node
    dcp.load(state, checkpoint_id=str(path))
    start = slurmpre.resume_step()  # the steps that checkpoint holds
for step in range(start, total):
    if slurmpre.preemption_requested():  # the node is draining: every rank agrees on this step
        with slurmpre.checkpoint(step) as path:  # atomic; `step` steps done, this one not yet
            dcp.save(state, checkpoint_id=str(path))
        break  # the next job (or attempt) resumes from it
    train_one_step(step)
    done = step + 1
    if done % args.every == 0:
        with slurmpre.checkpoint(done) as path:  # periodic checkpoints count too
            dcp.save(state, checkpoint_id=str(path))
# --- end of the README's loop ---

dist.destroy_process_group()
