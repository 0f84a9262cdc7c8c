"""bench/big_state.py's training job: a big state saved with DCP, a step every 0.5 s.

``python bench/big_state_train.py --state-mb N --steps S --every K`` under torchrun
(gloo, CPU). The state is N MB of float32, one tensor of N rows of 1 MB
sharded over the ranks by rows as a DTensor (``Shard(0)``), so DCP writes one shard per
rank and reads them back onto any number of ranks. Each step adds a constant to one
eighth of the rows (``bump``), cheap and exact in float32 (every value is a multiple of
0.25 far below 2**24), so the state after S steps is known without training
(`expected_digest`), on any number of ranks, however often it was interrupted.

Two ways to checkpoint, as the drill's trainer has them:
- ``--mode slurmpre``: resume from ``slurmpre.resume_path()``; a periodic checkpoint every
  K steps through ``slurmpre.checkpoint``; on ``slurmpre.preemption_requested()`` save
  and stop;
- ``--mode seeds``: the provider's recipe: periodic saves straight into ``step-N``, and
  after a requeue (``SLURM_RESTART_COUNT`` > 0) resume from the highest-numbered one.

Rank 0 appends one JSON line per event to ``<checkpoint dir>/big-steps.jsonl`` (an
attempt's start and resumed step, each step with its wall time, each save with how long
it stopped the training, whether the resumed state was exact) and at the end writes the
sha256 of the whole state, in element order, to ``big-final.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

LOG = "big-steps.jsonl"
FINAL = "big-final.json"
COLS = 250_000  # a row is 1 MB of float32: the state is --state-mb rows
PARTS = 8  # a step adds to one of these bands of rows, in turn
PATTERN = 1000  # the fresh state: element j of every row is (j % PATTERN) * 0.5
ROWS_AT_ONCE = 16  # rows compared or sent at once (16 MB)


def bump(step: int) -> float:
    """What step ``step`` (0-based) adds to its band: a multiple of 0.25."""
    return ((step % 5) + 1) * 0.25


def band(rows: int, k: int) -> tuple[int, int]:
    """The rows of band ``k``."""
    return k * rows // PARTS, (k + 1) * rows // PARTS


def added(steps: int) -> list[float]:
    """What ``steps`` steps have added to each band."""
    out = [0.0] * PARTS
    for s in range(steps):
        out[s % PARTS] += bump(s)
    return out


def fresh_row(torch: Any) -> Any:
    return (torch.arange(COLS) % PATTERN).to(torch.float32) * 0.5


def expected_digest(state_mb: int, steps: int) -> str:
    """The sha256 of the state an uninterrupted run of ``steps`` steps ends with."""
    import torch

    base, h = fresh_row(torch), hashlib.sha256()
    for k, total in enumerate(added(steps)):
        row = (base + total).numpy().tobytes()
        for _ in range(*band(state_mb, k)):
            h.update(row)
    return h.hexdigest()


class State:
    """This rank's rows of the state, as a DTensor (``Shard(0)``) in a DCP state dict.

    Two-dimensional as a model's weights are: DTensor finds a shard's offset with an
    ``arange`` over its first dimension (torch 2.13), which over one flat dimension of
    375M elements cost 3 GB and seconds at every save and load."""

    def __init__(self, state_mb: int) -> None:
        import torch
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import DTensor, Shard

        self.torch, self.dist = torch, dist
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.rows = state_mb
        if self.rows % self.world:
            raise SystemExit(f"{self.rows} rows do not split over {self.world} ranks")
        mine = self.rows // self.world
        self.first = self.rank * mine  # the global index of this rank's first row
        self.local = torch.empty(mine, COLS, dtype=torch.float32)
        mesh = init_device_mesh("cpu", (self.world,))
        w = DTensor.from_local(self.local, mesh, [Shard(0)], run_check=False)
        self.sd = {"w": w, "step": torch.zeros((), dtype=torch.int64)}

    def _mine(self, k: int) -> tuple[int, int]:
        """Band ``k``'s rows that this rank holds, as local row indices."""
        a, b = band(self.rows, k)
        a, b = max(a, self.first), min(b, self.first + len(self.local))
        return a - self.first, max(a, b) - self.first

    def fresh(self) -> None:
        self.local.copy_(fresh_row(self.torch).expand_as(self.local))

    def step(self) -> int:
        return int(self.sd["step"])

    def train(self, step: int) -> None:
        a, b = self._mine(step % PARTS)
        self.local[a:b].add_(bump(step))
        self.sd["step"].fill_(step + 1)

    def exact(self) -> bool:
        """The state is, bit for bit, what ``step()`` steps make (on every rank)."""
        base, ok = fresh_row(self.torch), True
        for k, total in enumerate(added(self.step())):
            want = base + total
            a, b = self._mine(k)
            for r in range(a, b, ROWS_AT_ONCE):
                rows = self.local[r : min(r + ROWS_AT_ONCE, b)]
                ok = ok and bool(self.torch.equal(rows, want.expand_as(rows)))
        flag = self.torch.tensor([0 if ok else 1])
        self.dist.all_reduce(flag)
        return int(flag) == 0

    def digest(self) -> str | None:
        """The sha256 of the whole state in element order (rank 0; None on the others)."""
        torch, dist = self.torch, self.dist
        if self.rank != 0:
            for r in range(0, len(self.local), ROWS_AT_ONCE):
                dist.send(self.local[r : r + ROWS_AT_ONCE].contiguous(), dst=0)
            return None
        h = hashlib.sha256(self.local.numpy().data)
        for src in range(1, self.world):
            for r in range(0, len(self.local), ROWS_AT_ONCE):
                buf = torch.empty(min(ROWS_AT_ONCE, len(self.local) - r), COLS)
                dist.recv(buf, src=src)
                h.update(buf.numpy().data)
        return h.hexdigest()

    def save(self, path: Path) -> None:
        import torch.distributed.checkpoint as dcp

        dcp.save(self.sd, checkpoint_id=str(path))

    def load(self, path: Path) -> None:
        import torch.distributed.checkpoint as dcp

        dcp.load(self.sd, checkpoint_id=str(path))


class Log:
    """Rank 0's events, one JSON line each, flushed at once (a kill loses none)."""

    def __init__(self, path: Path, rank: int, **about: object) -> None:
        self.fh = path.open("a") if rank == 0 else None
        self.about = about

    def __call__(self, event: str, **fields: object) -> None:
        if self.fh is not None:
            line = {"event": event, "t": time.time(), **self.about, **fields}
            self.fh.write(json.dumps(line) + "\n")
            self.fh.flush()


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench/big_state_train.py")
    parser.add_argument("--state-mb", type=int, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--every", type=int, required=True, help="a periodic save every K steps")
    parser.add_argument("--step-seconds", type=float, default=0.5)
    parser.add_argument("--mode", choices=("slurmpre", "seeds"), default="slurmpre")
    return parser.parse_args()


def _resume(mode: str, out: Path) -> tuple[Path | None, int]:
    """The checkpoint to resume from, and the attempt's number."""
    if mode == "slurmpre":
        import slurmpre

        return slurmpre.resume_path(), slurmpre.restart_count()
    restarts = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
    folders = sorted(out.glob("step-*"))  # the highest-numbered, complete or not
    return (folders[-1] if restarts and folders else None), restarts


def main() -> None:
    import torch
    import torch.distributed as dist

    args = _arguments()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    if args.mode == "slurmpre":
        import slurmpre

        out = slurmpre.checkpoint_dir()
    else:
        out = Path(os.environ["SLURMPRE_CHECKPOINT_DIR"])
    state = State(args.state_mb)
    resume, attempt = _resume(args.mode, out)
    log = Log(out / LOG, state.rank, job=os.environ.get("SLURM_JOB_ID"), attempt=attempt)
    if resume is None:
        state.fresh()
    else:
        state.load(resume)
    log("begin", resumed_step=state.step(), resume_path=resume and str(resume), world=state.world)

    def save(step: int, why: str) -> None:
        log("save-start", step=step, why=why)
        began = time.monotonic()
        if args.mode == "slurmpre":
            import slurmpre

            with slurmpre.checkpoint(step) as path:
                state.save(path)
        else:
            state.save(out / f"step-{step:08d}")
            dist.barrier()
        log("save", step=step, why=why, stall_s=time.monotonic() - began)

    check = resume is not None
    for step in range(state.step(), args.steps):
        began = time.monotonic()
        if args.mode == "slurmpre" and slurmpre.preemption_requested():
            save(step, "stop")
            log("stop", step=step)
            dist.barrier()
            dist.destroy_process_group()
            return
        state.train(step)
        log("step", step=step + 1)
        if check:  # the resumed state, one step on: what step + 1 steps make, exactly?
            log("resume-check", step=step + 1, exact=state.exact())
            check = False
        time.sleep(max(0.0, args.step_seconds - (time.monotonic() - began)))
        if (step + 1) % args.every == 0 and step + 1 < args.steps:
            save(step + 1, "periodic")
    digest = state.digest()
    if state.rank == 0:
        final = {"steps": state.step(), "sha256": digest, "world": state.world}
        (out / FINAL).write_text(json.dumps(final) + "\n")
    log("done", step=state.step())
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    main()
