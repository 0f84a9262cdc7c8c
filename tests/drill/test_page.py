"""The drill's side-by-side page (`drill.page`): slurmpre's run and the seeds' recipe on
one time axis, drawn from a real run's timelines (#53)."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

from slurmpre.drill import page
from slurmpre.drill.options import DrillResult

from tests.drill.test_overlaps import RECORDED
from tests.test_timeline_page import TAGS, Shapes


def sections(text: str) -> dict[str, Shapes]:
    """Each run's part of the page, by its heading."""
    parts = re.split(r"<h2>(.*?)</h2>", text)
    return {parts[i]: Shapes(parts[i + 1]) for i in range(1, len(parts), 2)}


def test_the_drill_writes_both_sides_on_one_time_axis(tmp_path: Path) -> None:
    """`./bin/drill --seed 1398317274`'s timelines: slurmpre handed over three times and
    lost nothing; the seeds' recipe waited out each requeue on its one node."""
    (tmp_path / "timelines.json").write_bytes(gzip.decompress(RECORDED.read_bytes()))
    result = DrillResult.load(tmp_path / "timelines.json")
    path = page.write(result)
    assert path == tmp_path / "timeline.html"
    text = path.read_text()
    assert Shapes(text).tags <= TAGS
    runs = sections(text)
    ours, seeds = (
        runs["slurmpre"],
        runs["the seeds&#x27; recipe (--requeue, a checkpoint every N steps)"],
    )
    assert len(runs) == 3  # and the uninterrupted reference
    lanes = [t for t in ours.texts if t.endswith("(preemptible)")]
    assert lanes == ["gpu-preemptible-dp-1 (preemptible)", "gpu-preemptible-dp-2 (preemptible)"]
    # The drill's own drains and removals: three each, on each side.
    for side in (ours, seeds):
        assert len(side.titles("drain")) == 3 and len(side.titles("removal")) == 3
    assert [t.split("\n")[0] for t in ours.titles("handover")] == [
        "hand-over: job 2 -> job 3", "hand-over: job 3 -> job 4", "hand-over: job 4 -> job 5",
    ]  # fmt: skip
    assert seeds.titles("handover") == []
    assert len([t for t in seeds.titles("wait") if t.startswith("no attempt runs (requeue)")]) == 3
    assert any("1155 steps lost" in t for t in seeds.texts)
    assert any("0 steps lost" in t for t in ours.texts)
    # One axis: each run's ticks run as long as the longest run (the recipe's 877 s).
    ticks = [[t for t in side.texts if re.fullmatch(r"\+\d+m\d\ds", t)] for side in runs.values()]
    assert ticks[0] == ticks[1] == ticks[2] and ticks[0][-1] == "+14m00s"
