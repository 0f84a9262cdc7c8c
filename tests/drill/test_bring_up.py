"""The drill names the Slurm release and timings it runs on, whatever state it found the
sandbox in: a sandbox already up says only that."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, cast

from slurmpre.drill.options import DrillOptions, DrillResult
from slurmpre.drill.run import bring_up
from slurmpre.drill.table import render
from slurmpre.lines import sent_to
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.sandbox.config import State

from tests.drill.test_result import result


class _UpAlready:
    """A sandbox that is up: `up` says so and returns what it recorded."""

    def __init__(self, state: State) -> None:
        self.state = state

    def up(self, **_: Any) -> State:
        logging.getLogger("slurmpre.sandbox.cluster").info("sandbox already up")
        return self.state


def test_a_sandbox_already_up_is_named_by_its_release_and_timings() -> None:
    said: list[str] = []
    box = cast(Sandbox, _UpAlready(State(version=[26, 5, 1], timings="stock", nodes=[])))
    with sent_to(said.append, "slurmpre.drill", "slurmpre.sandbox"):
        assert bring_up(box, DrillOptions()) == "stock"
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


class _Refusing:
    """A sandbox whose `up` refuses with ``first``, then comes up; counts its `down`s."""

    def __init__(self, first: Exception) -> None:
        self.first: Exception | None = first
        self.downs = 0

    def up(self, **_: Any) -> State:
        if self.first is not None:
            exc, self.first = self.first, None
            raise exc
        return State(version=[26, 5, 5], timings="tuned", nodes=[])

    def down(self) -> None:
        self.downs += 1


def test_only_a_sandbox_up_in_another_shape_is_restarted(monkeypatch: Any) -> None:
    """Another shape (nothing queued): down, then up in the drill's. Any other refusal
    (a bad --shared-mbps, a folder in the way) is the user's to read: the sandbox stays."""
    import pytest
    from slurmpre.drill import run
    from slurmpre.errors import OtherShape, UsageError

    monkeypatch.setattr(run, "_queued", lambda _: False)
    shaped = _Refusing(OtherShape("the sandbox is up with 4 nodes"))
    assert bring_up(cast(Sandbox, shaped), DrillOptions()) == "tuned"
    assert shaped.downs == 1
    refused = _Refusing(UsageError("--shared-dir /x: not empty"))
    with pytest.raises(UsageError, match="not empty"):
        bring_up(cast(Sandbox, refused), DrillOptions())
    assert refused.downs == 0
