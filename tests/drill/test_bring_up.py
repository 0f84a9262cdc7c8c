"""The drill names the Slurm release and timings it runs on, whatever state it found the
sandbox in: a sandbox already up says only that."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from slurmpre.drill.options import DrillOptions, DrillResult
from slurmpre.drill.run import bring_up
from slurmpre.drill.table import render
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.sandbox.config import State

from tests.drill.test_result import result


class _UpAlready:
    """A sandbox that is up: `up` says so and returns what it recorded."""

    def __init__(self, state: State) -> None:
        self.state = state

    def up(self, *, say: Callable[[str], None], **_: Any) -> State:
        say("sandbox already up")
        return self.state


def test_a_sandbox_already_up_is_named_by_its_release_and_timings() -> None:
    said: list[str] = []
    box = cast(Sandbox, _UpAlready(State(version=[26, 5, 1], timings="stock", nodes=[])))
    assert bring_up(box, DrillOptions(), said.append) == "stock"
    assert said == ["sandbox already up", "sandbox: Slurm 26.05.1, stock timings"]


def test_the_summary_names_the_release_and_the_timelines_keep_it(tmp_path: Path) -> None:
    ran = result()
    ran.slurm, ran.workdir = "24.11.5", tmp_path
    assert any(
        line.startswith("summary (Slurm 24.11.5, sandbox timings: tuned;") for line in render(ran)
    )
    assert json.loads(json.dumps(ran.as_dict()))["slurm"] == "24.11.5"
    again = DrillResult.load(ran.save())
    assert again.slurm == "24.11.5"
    # A run recorded before the release was: its summary as it was.
    old = tmp_path / "old.json"
    doc = json.loads((tmp_path / "timelines.json").read_text())
    del doc["slurm"]
    old.write_text(json.dumps(doc))
    before = DrillResult.load(old)
    assert before.slurm is None
    assert any(line.startswith("summary (sandbox timings: tuned;") for line in render(before))
