"""A user's restarts take turns: at most SUBMIT_SLOTS of a user's jobs submit a
successor or requeue at once, so a wave of preemptions does not send slurmctld all of
them together. The slots are locks in the user's shared folder (`drainboard.folder`).
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable, Iterator, Mapping

from slurmpre.folder.access import OWNER, make_dirs
from slurmpre.folder.locks import FolderLock, LockTimeout
from slurmpre.job.watch.drainboard import folder

SUBMIT_SLOTS = 4  # a user's jobs submit or requeue at most this many at once
SLOT_WAIT = 10.0  # seconds a job waits for a slot at most; then it goes anyway


@contextlib.contextmanager
def submit_slot(
    env: Mapping[str, str],
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[None]:
    """One of the slots. Free at once, it costs nothing; taken, the job waits in jittered
    steps (up to a second) and, after SLOT_WAIT, goes anyway: a restart is never lost to
    a slow volume."""
    where = folder(env)
    if where is None:
        yield
        return
    rng = random.Random()
    held: FolderLock | None = None
    deadline = clock() + SLOT_WAIT
    try:
        make_dirs(where, OWNER)
        while held is None and clock() < deadline:
            for i in rng.sample(range(SUBMIT_SLOTS), SUBMIT_SLOTS):
                lock = FolderLock(where / f"submit-{i}.lock", timeout=0, mode=OWNER.file_mode)
                with contextlib.suppress(LockTimeout):
                    held = lock.acquire(0)
                    break
            if held is None:
                sleep(rng.uniform(0.1, 1.0))
    except OSError:
        held = None  # the shared folder is not usable: go on without a slot
    try:
        yield
    finally:
        if held is not None:
            held.release()
