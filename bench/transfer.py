"""Hand-over pull speed: a checkpoint folder pulled from a node's local tier over TCP
(target >= 500 MB/s on localhost for 1024 MB).

A folder of N MB of random bytes (a few large files, a small one, a subfolder, as a
checkpoint looks) is made in a scratch folder (in /dev/shm when there is one, so the
disk is not what is measured), served by `slurmpre.tier.transfer.Server` and pulled with
`pull` on localhost, both ends hashing every byte. The server runs in a process of its
own, as on the old node; each run pulls into a fresh folder, and the best run is shown.
Usage: python bench/transfer.py [--mb 1024] [--runs 3]
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import platform
import secrets
import shutil
import sys
import tempfile
from multiprocessing.connection import Connection
from pathlib import Path

from slurmpre.tier.transfer import Server, pull

TARGET_MB_S = 500.0
NAME = "step-00000012"


def make_folder(root: Path, mb: int) -> None:
    """N MB (MiB) in all: four shards, a 1 MB optimizer file in a subfolder, a tiny metadata
    file. One random MB repeated with a counter in front of each: incompressible enough,
    and made at memory speed rather than urandom's."""
    folder = root / NAME
    (folder / "optim").mkdir(parents=True)
    block = os.urandom(1 << 20)
    shards = [(mb - 1) // 4 + (i < (mb - 1) % 4) for i in range(4)]
    for i, count in enumerate(shards):
        with open(folder / f"model-{i:05d}.safetensors", "wb") as f:
            for j in range(count):
                f.write((i << 32 | j).to_bytes(8, "big") + block[8:])
    (folder / "optim" / "state.pt").write_bytes(os.urandom(1 << 20))
    (folder / "meta.json").write_text('{"step": 12}\n')


def serve(root: str, key: bytes, pipe: Connection) -> None:
    """The old node: serve until the bench says it is done (or goes away)."""
    with Server(Path(root), key, host="127.0.0.1") as server:
        pipe.send(server.port)
        with contextlib.suppress(EOFError):
            pipe.recv()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=1024, help="size of the folder, in MB")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    scratch = Path(tempfile.mkdtemp(prefix="bench-transfer-", dir=shm))
    key = secrets.token_bytes(32)
    ctx = multiprocessing.get_context("spawn")
    pipe, theirs = ctx.Pipe()
    runs = []
    try:
        make_folder(scratch / "served", args.mb)
        total = sum(p.stat().st_size for p in (scratch / "served").rglob("*") if p.is_file())
        server = ctx.Process(target=serve, args=(str(scratch / "served"), key, theirs))
        server.start()
        port = pipe.recv()
        for run in range(args.runs):
            dest = scratch / f"pulled-{run}"
            got = pull("127.0.0.1", port, key, NAME, dest)
            assert got.bytes == total, (got, total)
            runs.append(got)
            print(f"  run {run + 1}: {got.bytes / 2**20 / got.seconds:.0f} MB/s", file=sys.stderr)
            shutil.rmtree(dest)
        pipe.send("done")
        server.join(timeout=60)
    finally:
        pipe.close()
        shutil.rmtree(scratch, ignore_errors=True)
    best = min(runs, key=lambda r: r.seconds)
    mb = best.bytes / 2**20
    print(
        f"pulled {mb:.0f} MB in {best.seconds:.2f} s: {mb / best.seconds:.0f} MB/s "
        f"(best of {args.runs}; Python {platform.python_version()}, "
        f"this machine: {os.cpu_count()} cores; target >= {TARGET_MB_S:.0f} MB/s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
