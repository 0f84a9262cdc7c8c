"""What sandboxes side by side share: munged (one key for all), and a Debian root's
mounts when they run the same release. The first one up mounts the root; the last one
down unmounts it and stops munged; one that goes down earlier hands its munged to one
still up, whose `down` then stops it. The login shells' profile names the Slurm of a
sandbox that is up."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from slurmpre import procs
from slurmpre.sandbox.instance import STATE_FILE, STATE_ROOT
from slurmpre.sandbox.roots import Root

# Held while a sandbox comes up (mounts a root) or goes down (may unmount it).
MOUNTS_LOCK = STATE_ROOT / "mounts.lock"


def others_up(state_dir: Path, root: Path | None = None) -> list[Path]:
    """The state folders of the other sandboxes whose controller is alive (on ``root``,
    when given: those that need it mounted), so that the last one down, not the first,
    unmounts a shared root or stops a shared munged."""
    found = []
    want = None if root is None else str(root)
    for other in sorted(STATE_ROOT.glob("sandbox*/sandbox.json")):
        if other.parent.resolve() == state_dir.resolve():
            continue
        try:
            data = json.loads(other.read_text())
        except (OSError, ValueError):
            continue
        pid = data.get("slurmctld") if isinstance(data, dict) else None
        alive = any(
            isinstance(p, int) and procs.is_process_of(p, name)
            for p, name in [(pid, "slurmctld")]
            + [(n.get("pid"), "slurmd") for n in data.get("nodes", []) if isinstance(n, dict)]
        )
        if alive and (want is None or data.get("root") == want):
            found.append(other.parent)
    return found


def root_of(state_dir: Path) -> Root | None:
    """The root a sandbox's state records (None: the host's Slurm, or no state)."""
    try:
        data = json.loads((state_dir / STATE_FILE).read_text())
        root, suite = data.get("root"), data.get("suite")
    except (OSError, ValueError, AttributeError):
        return None
    return Root(suite, Path(root)) if isinstance(root, str) and isinstance(suite, str) else None


def leave(
    state_dir: Path,
    root: Root | None,
    munged: int | None,
    hand_over: Callable[[Path, int], bool],
) -> None:
    """A sandbox goes down: its munged (``munged``: the pid it started, if any) and its
    root's mounts go too, unless another sandbox on the same Slurm is still up; then
    ``hand_over(other_state_dir, pid)`` records the munged as the other's; it says False
    when it could not within a few seconds (the other is busy coming up or going down),
    and the munged then runs on unrecorded: stopping it would break the other."""
    up = others_up(state_dir)
    others = [o for o in up if root_of(o) == root]
    ours = munged is not None and procs.is_process_of(munged, "munged")
    if ours and not others:
        procs.stop([munged], grace=5.0)  # type: ignore[list-item]
    elif ours:
        # Another uses it: never stopped under it. Not taken (its lock busy: going down, or
        # coming up), it runs on unrecorded, which only `up` on a host with none would see.
        hand_over(others[0], munged)  # type: ignore[arg-type]
    if root is not None and not others:
        root.unmount()  # and the login shells' profile that named it
        # A login shell finds the commands of a sandbox still up, in a root of another release.
        still = [r for r in map(root_of, up) if r is not None]
        if still:
            still[0].write_profile()
