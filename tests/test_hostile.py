"""Hostile folders against the commands that read and prune checkpoints (#22).

A generated folder holds real checkpoints of every layout, and around them what a
careless tool or a hostile neighbour leaves: links at every depth (to outside, to
another checkpoint, loops), FIFOs and ``/dev/zero`` where a tag, a marker or
``.metadata`` should be, copies under a later step's name, steps too large for the
grammar, names in other digits. Every command runs as a user would run it (a
subprocess), under a 200 MB address-space limit and a time-out, and:

- none hangs, exits 3, or prints a traceback;
- prune, before and after: every file outside the folder is untouched, and so is every
  file of the newest complete checkpoint, which is still the newest complete one.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import resource
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from slurmpre.folder.checkpoints import latest, step_dir_name, writing

FOLDERS = 12
LIMIT = 200 << 20  # bytes of address space for each command


def bounded(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``python -m slurmpre ARGS`` under the memory limit; a hang fails the test."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))

    try:
        return subprocess.run(
            [sys.executable, "-m", "slurmpre", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            preexec_fn=limit,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"slurmpre {' '.join(args)} did not return within {timeout:g} s (a hang)")


def sane(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    """A command that ended as slurmpre promises: 0, 1 or 2, one-line errors, no traceback."""
    assert proc.returncode in (0, 1, 2), (proc.args, proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr and "unexpected" not in proc.stderr, proc.stderr
    return proc


# -- what the folders are made of ---------------------------------------------------
def torch_zip(path: Path, payload: bytes = b"w") -> Path:
    """A file shaped as torch.save writes it (a zip holding data.pkl): what Lightning saves."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", payload)
    return path


def committed(folder: Path, step: int, payload: bytes = b"weights") -> Path:
    with writing(folder, step) as incoming:
        (incoming / "model.pt").write_bytes(payload)
        (incoming / "sub").mkdir()
        (incoming / "sub" / "optim.pt").write_bytes(payload * 2)
    return folder / step_dir_name(step)


def dcp(folder: Path, name: str) -> Path:
    path = folder / name
    path.mkdir(parents=True)
    (path / "__0_0.distcp").write_bytes(b"shard")
    (path / ".metadata").write_bytes(b"\x80\x04...__0_0.distcp...")
    return path


def hf(folder: Path, step: int, *, saving: bool = False) -> Path:
    path = folder / f"checkpoint-{step}"
    path.mkdir(parents=True)
    (path / "model.safetensors").write_bytes(b"weights")
    (path / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    if saving:  # the Trainer's own just-in-time save, still running
        (path / "checkpoint-is-incomplete.txt").write_text("")
    return path


def outside_world(root: Path) -> Path:
    """What lies beside the checkpoint folder and must never be touched through it."""
    out = root / "outside"
    committed(out, 99, b"theirs")
    for rel in (
        "version_0/checkpoints/epoch=0-step=500.ckpt",
        "lightning_logs/version_0/checkpoints/epoch=0-step=600.ckpt",
        "checkpoints/epoch=0-step=700.ckpt",
        "file.ckpt",
    ):
        torch_zip(out / rel, b"theirs")
    (out / "marker.json").write_text(json.dumps({"step": 98, "files": {}}))
    (out / "global_step7").mkdir()
    (out / "global_step7" / "mp_rank_00_model_states.pt").write_bytes(b"theirs")
    return out


# Each a way of spoiling a folder; a generated folder gets a random half of them.
def _link_lightning_logs(f: Path, out: Path, rng: random.Random) -> None:
    if not (f / "lightning_logs").exists():
        (f / "lightning_logs").symlink_to(out / "lightning_logs")


def _link_version(f: Path, out: Path, rng: random.Random) -> None:
    logs = f / "lightning_logs"
    if not logs.is_symlink():
        logs.mkdir(exist_ok=True)
        (logs / "version_9").symlink_to(out / "version_0")


def _link_checkpoints(f: Path, out: Path, rng: random.Random) -> None:
    version = f / "lightning_logs" / "version_8"
    if not (f / "lightning_logs").is_symlink():
        version.mkdir(parents=True, exist_ok=True)
        (version / "checkpoints").symlink_to(out / "checkpoints")


def _link_ckpt_file(f: Path, out: Path, rng: random.Random) -> None:
    version = f / "lightning_logs" / "version_0" / "checkpoints"
    if not (f / "lightning_logs").is_symlink():
        version.mkdir(parents=True, exist_ok=True)
        (version / "epoch=9-step=900.ckpt").symlink_to(out / "file.ckpt")
        (version / "last.ckpt").symlink_to(out / "file.ckpt")


def _alias_of_own(f: Path, out: Path, rng: random.Random) -> None:
    own = sorted(p for p in f.glob("step-*") if p.is_dir() and not p.is_symlink())
    if own:
        (f / step_dir_name(95)).symlink_to(own[0].name)  # relative, stays inside


def _alias_of_dcp(f: Path, out: Path, rng: random.Random) -> None:
    dcp(f, "step_86")  # above the steps the base folder takes (1 to 85)
    (f / "step_87").symlink_to("step_86")


def _link_out_own(f: Path, out: Path, rng: random.Random) -> None:
    (f / step_dir_name(97)).symlink_to(out / step_dir_name(99))


def _link_out_deepspeed(f: Path, out: Path, rng: random.Random) -> None:
    (f / "global_step7").symlink_to(out / "global_step7")
    (f / "latest").write_text("global_step7")


def _copy_under_later_step(f: Path, out: Path, rng: random.Random) -> None:
    own = sorted(p for p in f.glob("step-*") if p.is_dir() and not p.is_symlink())
    if own:
        copy = f / step_dir_name(96)
        copy.mkdir()
        for item in own[0].rglob("*"):
            target = copy / item.relative_to(own[0])
            if item.is_dir():
                target.mkdir(exist_ok=True)
            else:
                target.write_bytes(item.read_bytes())


def _fifo_tag(f: Path, out: Path, rng: random.Random) -> None:
    if not (f / "latest").exists():
        os.mkfifo(f / "latest")
        (f / "global_step3").mkdir()
        (f / "global_step3" / "mp_rank_00_model_states.pt").write_bytes(b"x")


def _zero_tag(f: Path, out: Path, rng: random.Random) -> None:
    if not os.path.lexists(f / "latest"):
        (f / "latest").symlink_to("/dev/zero")


def _hostile_marker(f: Path, out: Path, rng: random.Random) -> None:
    partial = f / step_dir_name(94)
    partial.mkdir()
    (partial / "model.pt").write_bytes(b"half")
    marker = partial / ".slurmpre-complete"
    choice = rng.choice(["fifo", "zero", "outside"])
    if choice == "fifo":
        os.mkfifo(marker)
    elif choice == "zero":
        marker.symlink_to("/dev/zero")
    else:
        marker.symlink_to(out / "marker.json")


def _hostile_metadata(f: Path, out: Path, rng: random.Random) -> None:
    path = f / "step_93"
    path.mkdir()
    (path / "__0_0.distcp").write_bytes(b"x")
    if rng.random() < 0.5:
        os.mkfifo(path / ".metadata")
    else:
        (path / ".metadata").symlink_to("/dev/zero")


def _hostile_trainer_state(f: Path, out: Path, rng: random.Random) -> None:
    path = f / "checkpoint-92"
    path.mkdir()
    (path / "model.safetensors").write_bytes(b"x")
    os.mkfifo(path / "trainer_state.json")


def _fifo_ckpt(f: Path, out: Path, rng: random.Random) -> None:
    version = f / "lightning_logs" / "version_1" / "checkpoints"
    if not (f / "lightning_logs").is_symlink():
        version.mkdir(parents=True, exist_ok=True)
        os.mkfifo(version / "epoch=8-step=880.ckpt")
        (version / "epoch=8-step=890.ckpt").symlink_to("/dev/zero")


def _huge_steps(f: Path, out: Path, rng: random.Random) -> None:
    for name in (
        "step-1000000000000000000",
        "step_99999999999999999999",
        "checkpoint-1" + "0" * 30,
    ):
        (f / name).mkdir()
        (f / name / ".metadata").write_bytes(b"__0_0.distcp")
        (f / name / "__0_0.distcp").write_bytes(b"x")


def _other_digits(f: Path, out: Path, rng: random.Random) -> None:
    name = "step-" + "\u0669" * 8  # eight Arabic-Indic nines
    (f / name).mkdir()
    (f / name / ".slurmpre-complete").write_text("{}")


def _odd_names(f: Path, out: Path, rng: random.Random) -> None:
    for name in ("step_7 copy", "step_\n8", "checkpoint-9\t", "-step_6", "step-0000 0089",
                 "step_\u0663", "ste\u0301p_5", ".step_84", "step_83\x1b[2J"):  # fmt: skip
        (f / name).mkdir()
        (f / name / ".metadata").write_bytes(b"__0_0.distcp")
        (f / name / "__0_0.distcp").write_bytes(b"x")


def _loops(f: Path, out: Path, rng: random.Random) -> None:
    (f / "step_91").symlink_to("step_91")
    (f / "checkpoint-90").symlink_to(f / "checkpoint-89")
    (f / "checkpoint-89").symlink_to(f / "checkpoint-90")


def _file_by_a_folder_name(f: Path, out: Path, rng: random.Random) -> None:
    (f / step_dir_name(88)).write_bytes(b"not a folder")


SPOILERS = [
    _link_lightning_logs,
    _link_version,
    _link_checkpoints,
    _link_ckpt_file,
    _alias_of_own,
    _alias_of_dcp,
    _link_out_own,
    _link_out_deepspeed,
    _copy_under_later_step,
    _fifo_tag,
    _zero_tag,
    _hostile_marker,
    _hostile_metadata,
    _hostile_trainer_state,
    _fifo_ckpt,
    _huge_steps,
    _other_digits,
    _odd_names,
    _loops,
    _file_by_a_folder_name,
]


def hostile_folder(root: Path, rng: random.Random) -> tuple[Path, Path, list[str]]:
    """(the checkpoint folder, the world outside it, the spoilers applied)."""
    out = outside_world(root)
    f = root / "ckpt"
    (f / ".slurmpre").mkdir(parents=True)
    for step in rng.sample(range(1, 60), rng.randint(1, 4)):
        committed(f, step)
    for step in rng.sample(range(60, 80), rng.randint(0, 2)):
        (f / step_dir_name(step)).mkdir()
    if rng.random() < 0.5:
        dcp(f, f"step_{rng.randint(1, 85)}")
    if rng.random() < 0.5:
        hf(f, rng.randint(1, 85), saving=rng.random() < 0.5)
    if rng.random() < 0.5:
        versions = f / "lightning_logs" / "version_0" / "checkpoints"
        torch_zip(versions / f"epoch=0-step={rng.randint(1, 85)}.ckpt")
    chosen = [s for s in SPOILERS if rng.random() < 0.5]
    for spoil in chosen:
        spoil(f, out, rng)
    return f, out, [s.__name__ for s in chosen]


def fingerprint(root: Path) -> dict[str, str]:
    """Every entry under ``root`` (links not followed): its kind and its content's hash."""
    seen = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                seen[rel] = f"link {path.readlink()}"
            elif path.is_dir():
                seen[rel] = "dir"
            elif path.is_file():
                seen[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                seen[rel] = "special"
    return seen


# -- the tests ----------------------------------------------------------------------
@pytest.mark.parametrize("index", range(FOLDERS))
def test_no_command_hangs_and_prune_touches_nothing_it_must_not(
    tmp_path: Path, index: int, seed: int
) -> None:
    rng = random.Random(seed * 1000 + index)  # the folders differ even under one seed
    folder, out, spoilers = hostile_folder(tmp_path, rng)
    print(f"folder {index}: {', '.join(spoilers) or 'no spoilers'}")
    outside_before = fingerprint(out)
    # What reads first: none of these may hang, exhaust memory or crash.
    listed = sane(bounded("ckpt", "list", "--all", str(folder)))
    shown = listed.stdout + listed.stderr
    assert not [c for c in shown if not c.isprintable() and c != "\n"], shown  # no escapes sent
    sane(bounded("ckpt", "list", "--json", str(folder)))
    chosen = sane(bounded("ckpt", "latest", str(folder)))
    for entry in sorted(folder.iterdir())[:12]:
        sane(bounded("ckpt", "verify", str(entry)))
    newest = latest(folder).checkpoint  # safe in-process now: `ckpt latest` returned
    assert newest is not None, chosen.stderr  # every folder holds a committed checkpoint
    assert chosen.stdout.strip() == newest.where
    assert Path(newest.where).resolve().is_relative_to(folder.resolve())
    assert not Path(newest.where).is_symlink()
    newest_before = fingerprint(Path(newest.where)) if newest.path.is_dir() else None
    keep = rng.randint(1, 3)
    sane(bounded("ckpt", "prune", str(folder), "--keep", str(keep), "--wait", "5"))
    assert fingerprint(out) == outside_before, "prune changed files outside its folder"
    after = latest(folder).checkpoint
    assert after is not None and after.where == newest.where, "the newest complete one went"
    if newest_before is not None:
        assert fingerprint(Path(newest.where)) == newest_before
