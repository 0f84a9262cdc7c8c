"""The end-to-end elastic trainer (#36): a linear model over a fixed dataset, fed by
slurmpre's `ElasticSampler` with a constant global batch (`batching`), so that any
sequence of world sizes trains the same optimizer steps on the same samples.

Each rank computes the gradient of each of its samples; the ranks' rows are gathered in
rank order, which is the global batch's own order (rank r takes the r-th block of it), and
summed as one (GLOBAL, DIM) tensor: the update is the same bits on any world size. Every
rank logs each optimizer step it trained, with its samples (``samples.jsonl``); rank 0
logs each attempt's start (``progress.jsonl``) and the final weights (``final.pt``).

``--hold S,T,...``: an attempt holds at the first of these steps past the one it resumed
from, until a notice (the test then changes the capacity knowing where the run is: no
race with the training's pace); rank 0 marks ``holding-<step>``.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import slurmpre
import torch
import torch.distributed as dist

SIZE, DIM, GLOBAL, MICRO = 96, 8, 12, 1  # 8 optimizer steps per epoch; 12 = 1*2*2*3
LR = 0.05


def data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    x = torch.randn(SIZE, DIM, generator=g, dtype=torch.float64)
    w_true = torch.linspace(-1, 1, DIM, dtype=torch.float64)
    y = x @ w_true + 0.01 * torch.randn(SIZE, generator=g, dtype=torch.float64)
    return x, y


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=48)
    parser.add_argument("--step-seconds", type=float, default=0.2)
    parser.add_argument("--hold", default="")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    out = slurmpre.checkpoint_dir()
    plan = slurmpre.batching(GLOBAL, MICRO)  # refuses a world size 12 cannot be split over
    sampler = slurmpre.ElasticSampler(SIZE, GLOBAL, MICRO, seed=3)
    w = torch.zeros(DIM, dtype=torch.float64)
    resume = slurmpre.resume_path()
    if resume is not None:
        w = torch.load(resume / "w.pt")
        sampler.resume(resume)
    step = sampler.consumed // GLOBAL
    tag = {"job": os.environ.get("SLURM_JOB_ID"), "attempt": slurmpre.restart_count(),
           "in_place": int(os.environ.get("SLURMPRE_IN_PLACE") or 0)}  # fmt: skip
    if rank == 0:
        line = {**tag, "resumed_step": step, "world": world, "t": time.time(),
                "previous_world": slurmpre.previous_world_size(),
                "accumulation": plan.accumulation}  # fmt: skip
        with (out / "progress.jsonl").open("a") as fh:
            fh.write(json.dumps(line) + "\n")
    hold = min((s for s in map(int, filter(None, args.hold.split(","))) if s > step), default=-1)
    x, y = data()
    log = (out / "samples.jsonl").open("a")
    while step < args.steps:
        if step == hold:
            if rank == 0:
                (out / f"holding-{step}").write_text(str(time.time()))
            while not slurmpre.preemption_requested():  # every rank asks: they agree
                time.sleep(0.1)
        if slurmpre.preemption_requested():  # every rank agrees on this step: save, stop
            with slurmpre.checkpoint(step, sampler=sampler) as path:
                if rank == 0:
                    torch.save(w, path / "w.pt")
            break
        micro = sampler.step_indices(step * GLOBAL)
        assert len(micro) == plan.accumulation
        mine = [i for batch in micro for i in batch]
        rows = torch.stack([2 * x[i] * (x[i] @ w - y[i]) for i in mine])
        every = [torch.empty_like(rows) for _ in range(world)]
        dist.all_gather(every, rows)
        w = w - LR * torch.cat(every).sum(dim=0) / GLOBAL
        log.write(json.dumps({**tag, "step": step, "rank": rank, "world": world,
                              "samples": mine}) + "\n")  # fmt: skip
        log.flush()
        sampler.advance()
        step += 1
        time.sleep(args.step_seconds)
    else:
        if rank == 0:
            torch.save({"w": w, "step": step}, out / "final.pt")
    log.close()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    main()
