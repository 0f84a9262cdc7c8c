"""The drill's training job: small, real, and bit-for-bit deterministic.

``python -m slurmpre.drill.train --steps N`` under torchrun (gloo, CPU). A
linear model trained with SGD and momentum on data generated from the step
number, so the result depends on nothing but the number of steps: each rank
writes the gradient of its own samples into its rows of a (batch, dim) table,
the table is summed over ranks (every element has one non-zero term, so the sum
is exact), and every rank adds the rows up in the same order. The final weights
are therefore the same bits on 1 node or 2, however often the world changes.

``--plain``: the same loop in pure Python (one process, no torch), for Slurm
releases whose root has no torch (sid's Python 3.14) and the plain launcher; the
state is JSON (a float's repr reads back as the same bits).

``--mode slurmpre`` checkpoints through slurmpre's API; ``--mode seeds`` is the
provider's recipe (docs/drill.md, "What it does", 6). Rank 0 appends what happened
to ``<checkpoint dir>/drill-steps.jsonl``, which the drill reads. Imports torch
unless ``--plain``: never imported by slurmpre itself.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from slurmpre import environment

DIM = 16
BATCH = 32
LOG = "drill-steps.jsonl"
FINAL = "final.pt"
FINAL_PLAIN = "final.json"
STATE = "state.json"  # the plain trainer's checkpoint: one file in the folder
ROWS = 64  # the big state's rows: step N adds 1 to row N % ROWS (`--state-mb`)


def _batch(torch: Any, step: int) -> tuple[Any, Any]:
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(BATCH, DIM, generator=g, dtype=torch.float64)
    w_true = torch.linspace(-1, 1, DIM, dtype=torch.float64)
    y = x @ w_true + 0.01 * torch.randn(BATCH, generator=g, dtype=torch.float64)
    return x, y


def train_step(
    torch: Any, state: dict[str, Any], step: int, rank: int, world: int, reduce: Any
) -> None:
    """One step; ``reduce`` sums a tensor over ranks in place (identity when alone)."""
    x, y = _batch(torch, step)
    rows = torch.zeros(BATCH, DIM, dtype=torch.float64)
    mine = torch.arange(rank, BATCH, world)
    err = x[mine] @ state["w"] - y[mine]
    rows[mine] = 2 * x[mine] * err[:, None] / BATCH
    reduce(rows)
    grad = rows.sum(dim=0)
    state["momentum"].mul_(0.9).add_(grad)
    state["w"].sub_(0.05 * state["momentum"])
    state["step"].fill_(step + 1)


def fresh_state(torch: Any) -> dict[str, Any]:
    return {
        "w": torch.zeros(DIM, dtype=torch.float64),
        "momentum": torch.zeros(DIM, dtype=torch.float64),
        "step": torch.zeros((), dtype=torch.int64),
    }


def big_state(torch: Any, mb: int) -> Any:
    """``mb`` MB (10**6 bytes) of float32 in ``ROWS`` rows, all zero: the drill's big-state
    scene carries it beside the model, as a real model carries its weights and optimizer."""
    per_row = max(mb * 250_000 // ROWS, 1)
    return torch.zeros(ROWS, per_row, dtype=torch.float32)


def big_state_rows(steps: int) -> list[float]:
    """Each row's value after ``steps`` uninterrupted steps: the steps that touched it."""
    return [float(len(range(row, steps, ROWS))) for row in range(ROWS)]


def seen_rows(payload: Any) -> list[float] | None:
    """Each row's value, or None when a row is not one value throughout (a torn state)."""
    if not bool((payload.amin(dim=1) == payload.amax(dim=1)).all()):
        return None
    return [float(v) for v in payload[:, 0]]


def reference(steps: int) -> dict[str, Any]:
    """The uninterrupted result, computed in this process (no Slurm, no torchrun)."""
    import torch

    state = fresh_state(torch)
    for step in range(steps):
        train_step(torch, state, step, 0, 1, lambda _: None)
    return {"w": state["w"], "step": int(state["step"]), "rows": big_state_rows(steps)}


def plain_fresh() -> dict[str, Any]:
    return {"w": [0.0] * DIM, "momentum": [0.0] * DIM, "step": 0}


def plain_step(state: dict[str, Any], step: int) -> None:
    """One step of the same model in pure Python, on its own data (a seeded ``random``).
    Only +, -, * and / on floats, in a fixed order (no ``sum``, whose rounding changed in
    Python 3.12, no libm), so any Python computes the same bits."""
    g = random.Random(1000 + step)
    w_true = [-1 + 2 * i / (DIM - 1) for i in range(DIM)]
    grad = [0.0] * DIM
    for _ in range(BATCH):
        x = [2 * g.random() - 1 for _ in range(DIM)]
        y = 0.01 * (2 * g.random() - 1)
        for i in range(DIM):
            y += x[i] * w_true[i]
        err = -y
        for i in range(DIM):
            err += x[i] * state["w"][i]
        for i in range(DIM):
            grad[i] += 2 * x[i] * err / BATCH
    for i in range(DIM):
        state["momentum"][i] = 0.9 * state["momentum"][i] + grad[i]
        state["w"][i] -= 0.05 * state["momentum"][i]
    state["step"] = step + 1


def plain_reference(steps: int) -> dict[str, Any]:
    """The plain trainer's uninterrupted result, computed in this process."""
    state = plain_fresh()
    for step in range(steps):
        plain_step(state, step)
    return {"w": state["w"], "step": state["step"]}


class _Trainer(Protocol):
    rank: int
    world: int

    def step(self) -> int: ...
    def train(self, step: int) -> None: ...
    def load(self, path: Path) -> None: ...
    def save(self, path: Path) -> None: ...
    def barrier(self) -> None: ...
    def end(self) -> None: ...
    def final(self, out: Path) -> None: ...


class _Torch:
    """Data-parallel over torch.distributed (gloo), saved with torch's DCP."""

    def __init__(self, state_mb: int = 0) -> None:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        dist.init_process_group("gloo")
        self.torch, self.dist = torch, dist
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.state = fresh_state(torch)
        if state_mb:
            self.state["payload"] = big_state(torch, state_mb)

    def step(self) -> int:
        return int(self.state["step"])

    def train(self, step: int) -> None:
        train_step(self.torch, self.state, step, self.rank, self.world, self.dist.all_reduce)
        if "payload" in self.state:
            self.state["payload"][step % ROWS].add_(1.0)

    def load(self, path: Path) -> None:
        from torch.distributed.checkpoint import load

        load(self.state, checkpoint_id=str(path))

    def save(self, path: Path) -> None:
        from torch.distributed.checkpoint import save

        save(self.state, checkpoint_id=str(path))

    def barrier(self) -> None:
        self.dist.barrier()

    def end(self) -> None:
        self.dist.barrier()
        self.dist.destroy_process_group()

    def final(self, out: Path) -> None:
        if self.rank == 0:
            final = {"w": self.state["w"], "step": self.step()}
            if "payload" in self.state:
                final["rows"] = seen_rows(self.state["payload"])
            self.torch.save(final, out / FINAL)


class _Plain:
    """One process, pure Python; the checkpoint is one JSON file."""

    rank, world = 0, 1

    def __init__(self) -> None:
        if int(os.environ.get("WORLD_SIZE") or os.environ.get("SLURM_STEP_NUM_TASKS") or 1) > 1:
            raise SystemExit("--plain trains in one process: run it on one node, one task")
        self.state = plain_fresh()

    def step(self) -> int:
        return int(self.state["step"])

    def train(self, step: int) -> None:
        plain_step(self.state, step)

    def load(self, path: Path) -> None:
        self.state = json.loads((path / STATE).read_text())

    def save(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        (path / STATE).write_text(json.dumps(self.state))

    def barrier(self) -> None:
        pass

    def end(self) -> None:
        pass

    def final(self, out: Path) -> None:
        (out / FINAL_PLAIN).write_text(json.dumps({"w": self.state["w"], "step": self.step()}))


class _Log:
    def __init__(self, folder: Path, rank: int, attempt: int) -> None:
        self.path = folder / LOG
        self.rank, self.attempt = rank, attempt

    def __call__(self, event: str, **fields: object) -> None:
        if self.rank != 0:
            return
        line = json.dumps({"event": event, "attempt": self.attempt, "t": time.time(), **fields})
        with self.path.open("a") as fh:
            fh.write(line + "\n")


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m slurmpre.drill.train")
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--every", type=int, default=40, help="periodic checkpoint every N steps")
    parser.add_argument("--step-seconds", type=float, default=0.2)
    parser.add_argument(
        "--save-seconds", type=float, default=1.0, help="how long a checkpoint write takes"
    )
    parser.add_argument("--work-ms", type=float, default=0.0, help="busy compute per step")
    parser.add_argument("--mode", choices=("slurmpre", "seeds"), default="slurmpre")
    parser.add_argument("--checkpoint-dir", default=None, help="(seeds mode) where to save")
    parser.add_argument("--plain", action="store_true", help="pure Python, one process")
    parser.add_argument(
        "--state-mb", type=int, default=0, help="carry this many MB of float32 beside the model"
    )
    args = parser.parse_args(argv)
    if args.state_mb and args.plain:
        parser.error("--state-mb needs torch: not with --plain")
    if not 0 <= args.state_mb <= 100_000:
        parser.error(f"--state-mb must be from 0 to 100000, got {args.state_mb}")
    return args


def _where(args: argparse.Namespace) -> tuple[Path, Path | None, int]:
    """The checkpoint folder, the checkpoint to resume from, and the restart count."""
    import slurmpre

    if args.mode == "slurmpre":
        # The restart count across the jobs of the run, successors too.
        return slurmpre.checkpoint_dir(), slurmpre.resume_path(), slurmpre.restart_count()
    restarts = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
    out = Path(args.checkpoint_dir or os.environ[environment.CHECKPOINT_DIR])
    # The seeds' recipe: the highest-numbered folder, complete or not.
    folders = sorted(out.glob("step-*"))
    return out, (folders[-1] if restarts and folders else None), restarts


def _save(
    args: argparse.Namespace, trainer: _Trainer, out: Path, log: _Log, step: int, why: str
) -> None:
    import slurmpre

    log("save-start", step=step, why=why)
    if args.mode == "slurmpre":
        with slurmpre.checkpoint(step) as path:
            trainer.save(path)
            time.sleep(args.save_seconds)
    else:
        trainer.save(out / f"step-{step:08d}")
        time.sleep(args.save_seconds)
        trainer.barrier()
    log("save-end", step=step, why=why)


def _train(
    args: argparse.Namespace, trainer: _Trainer, log: _Log, save: Callable[[int, str], None]
) -> bool:
    """Train to the last step (True), or until slurmpre says stop (False)."""
    import slurmpre

    for step in range(trainer.step(), args.steps):
        saved = False
        if args.mode == "slurmpre" and slurmpre.checkpoint_requested():
            # The notice: every rank agrees on this step; save it, and train on while
            # the job that takes over starts up (slurmpre says when to stop).
            save(step, "notice")
            saved = True
        if args.mode == "slurmpre" and slurmpre.preemption_requested():
            # Time to stop: save this step (unless just saved) and exit.
            if not saved:
                save(step, "stop")
            log("stop", step=step)
            return False
        trainer.train(step)
        log("step", step=step + 1)
        # A fixed global batch, split over the ranks: a step takes a node step_seconds,
        # and two nodes half as long, so the node-seconds (the cost) of a step are the
        # same on any number of nodes, as in data-parallel training.
        time.sleep(args.step_seconds / trainer.world)
        if args.work_ms:
            busy_until = time.perf_counter() + args.work_ms / 1000
            while time.perf_counter() < busy_until:
                pass
        done = step + 1
        if done % args.every == 0 and done < args.steps:
            save(done, "periodic")
    return True


def main(argv: list[str] | None = None) -> None:
    args = _arguments(argv)
    trainer: _Trainer = _Plain() if args.plain else _Torch(args.state_mb)
    out, resume, restarts = _where(args)
    log = _Log(out, trainer.rank, restarts)
    if resume is not None:
        trainer.load(resume)
    log(
        "begin",
        resumed_step=trainer.step(),
        resume_path=None if resume is None else str(resume),
        world=trainer.world,
    )
    if _train(args, trainer, log, functools.partial(_save, args, trainer, out, log)):
        trainer.final(out)
        log("done", step=trainer.step())
    trainer.end()


if __name__ == "__main__":
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    main()
