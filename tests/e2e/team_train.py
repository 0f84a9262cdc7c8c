"""A job of the team test (tests/e2e/test_team.py): pure Python, through slurmpre's API.

Trains ``STEPS`` steps of half a second, a checkpoint (``state.json``) every 5 and at
the notice; logs every step, with the step it resumed from, to ``progress.jsonl``."""

from __future__ import annotations

import json
import os
import time

import slurmpre

STEPS = int(os.environ["TEAM_STEPS"])


def main() -> None:
    resume = slurmpre.resume_path()
    step = json.loads((resume / "state.json").read_text())["step"] if resume else 0
    log = slurmpre.checkpoint_dir() / "progress.jsonl"

    def note(**fields: object) -> None:
        with log.open("a") as fh:
            fh.write(json.dumps({"t": time.time(), **fields}) + "\n")

    def save(at: int) -> None:
        with slurmpre.checkpoint(at) as path:
            (path / "state.json").write_text(json.dumps({"step": at}))

    note(event="begin", resumed=step, resume_path=None if resume is None else str(resume))
    while step < STEPS:
        if slurmpre.preemption_requested():
            save(step)
            note(event="stop", step=step)
            return
        time.sleep(0.5)
        step += 1
        note(event="step", step=step)
        if step % 5 == 0:
            save(step)
    note(event="done", step=step)


if __name__ == "__main__":
    main()
