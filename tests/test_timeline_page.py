"""`slurmpre status NAME --html FILE`: a run's timeline as one self-contained page, drawn
from a real ledger (`login.story`, `login.page`), and the command's edges."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import pytest
from slurmpre.cli import main
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.records import (
    Checkpoint,
    End,
    InPlace,
    Notice,
    Placed,
    Pulled,
    Record,
    Saved,
    Start,
    Submitted,
    Successor,
)
from slurmpre.login import page, story
from slurmpre.login.status import job_status

from tests.fakes import Jobs
from tests.timeline_runs import T0, preempted_once

# What the page may hold: nothing that runs, loads or links.
TAGS = {
    "html",
    "head",
    "meta",
    "title",
    "style",
    "body",
    "h1",
    "h2",
    "p",
    "ul",
    "li",
    "span",
    "svg",
    "rect",
    "text",
    "path",
    "line",
    "g",
    "polyline",
}


class Shapes(HTMLParser):
    """Every tag of a page, and each drawn thing as (its class, its tooltip)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.attributes: list[str] = []
        self.stack: list[tuple[str, str]] = []
        self.shapes: list[tuple[str, str]] = []
        self.texts: list[str] = []
        self._title: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attributes += [name for name, _ in attrs]
        self.stack.append((tag, dict(attrs).get("class") or ""))
        if tag == "title":
            self._title = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "title" and self._title is not None:
            owner = next((c for t, c in reversed(self.stack[:-1]) if c), "")
            self.shapes.append((owner, "".join(self._title)))
            self._title = None
        while self.stack:
            if self.stack.pop()[0] == tag:
                break

    def handle_data(self, data: str) -> None:
        if self._title is not None:
            self._title.append(data)
        self.texts.append(data)

    def titles(self, cls: str) -> list[str]:
        return [title for c, title in self.shapes if cls in c.split()]


def drawn(folder: Path) -> str:
    records = Ledger(folder, view=True).records()
    st = job_status("100", "train", str(folder), records, None, now=T0 + 500)
    return page.render("a run", [story.chart(st, records, T0 + 500)])


def test_a_run_preempted_once_names_every_node_and_shows_the_drain_and_the_hand_over(
    tmp_path: Path,
) -> None:
    preempted_once(tmp_path)
    shapes = Shapes(drawn(tmp_path))
    lanes = [t for t in shapes.texts if t.endswith("(preemptible)")]
    assert lanes == ["pre-a (preemptible)", "pre-b (preemptible)", "pre-c (preemptible)"]
    trained = shapes.titles("train")
    assert len(trained) == 4  # two attempts on two nodes each
    assert sum("job 100 attempt 0" in t for t in trained) == 2
    assert sum("job 101 attempt 0" in t and "resumed from step 80" in t for t in trained) == 2
    (drain,) = shapes.titles("drain")
    assert drain.startswith("drain of pre-b (preempted) (job 100)")
    assert "+3m20s" in drain  # when it drained, from the submission
    (handover,) = shapes.titles("handover")
    assert handover.startswith("hand-over: job 100 -> job 101\n+3m22s to +3m45s (23.0 s)")
    waits = shapes.titles("wait")
    assert any(t.startswith("job 101 waits for job 100\n+3m35s to +3m45s") for t in waits)
    writes = shapes.titles("checkpoint")
    assert any(t.startswith("checkpoint of step 80 on the notice\n+3m37s") for t in writes)
    # The cost so far, as `status` says it: 424 node-seconds for job 100, 390 for 101
    # (from its start-up beside 100).
    assert (
        "used 0.226 node-hours, 0.000 GPU-hours: $0.23 preemptible against $0.45 on "
        "demand" in shapes.texts
    )
    (end,) = shapes.titles("end")
    assert end.startswith("the run's last attempt: completed")


HOSTILE = [
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "</title></rect></svg><iframe src=//evil>",
    "a\nb\x1b[2J&amp;",
]


def test_every_string_from_the_ledger_is_escaped(tmp_path: Path) -> None:
    """A ledger in a shared folder is written by whoever could write it: its node names
    and job names are text on the page, never markup."""
    preempted_once(tmp_path, name=HOSTILE[0], nodes=(HOSTILE[1], HOSTILE[2], HOSTILE[3]))
    records = Ledger(tmp_path, view=True).records()
    st = job_status("100", HOSTILE[0], str(tmp_path), records, None, now=T0 + 500)
    text = page.render(HOSTILE[2], [story.chart(st, records, T0 + 500)], [HOSTILE[1]])
    shapes = Shapes(text)
    assert shapes.tags <= TAGS
    assert not [a for a in shapes.attributes if a.startswith("on") or a in ("src", "href")]
    for raw in HOSTILE[:3]:
        assert raw not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "a\\nb\\x1b[2J&amp;amp;" in text  # control characters shown, not sent
    assert f"{HOSTILE[1]} (preemptible)" in shapes.texts  # read back: the name, as it was


def test_a_time_no_calendar_holds_is_drawn_not_a_crash() -> None:
    """A ledger's numbers are finite, not plausible: 1e300 seconds is still drawn."""
    lane = page.Lane("node:n", "n", "preemptible")
    far = page.Bar("node:n", 0.0, 1e300, page.Kind.TRAIN, "long")
    mark = page.Mark("node:n", -1e300, page.Kind.DRAIN, "early")
    chart = page.Chart("c", 0.0, (lane,), (far,), (mark,), steps=((1e300, 10**30),))
    shapes = Shapes(page.render("t", [chart]))
    assert shapes.titles("train")[0].endswith("from 1970-01-01 00:00:00 UTC")
    assert "1e+300 s after 1970" in shapes.titles("drain")[0].replace("-1e", "1e")


@pytest.fixture
def no_slurm(monkeypatch: pytest.MonkeyPatch) -> Jobs:
    """Slurm has forgotten the jobs: the page is drawn from the ledger alone."""
    slurm = Jobs({})
    monkeypatch.setattr("slurmpre.login.handle.default_client", lambda: slurm)
    return slurm


def test_status_html_writes_the_page(
    tmp_path: Path, no_slurm: Jobs, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "ckpt"
    preempted_once(folder)
    out = tmp_path / "run.html"
    assert main(["status", "train", "--checkpoint-dir", str(folder), "--html", str(out)]) == 0
    assert capsys.readouterr().out == f"timeline of job 100 (train): {out}\n"
    shapes = Shapes(out.read_text())
    assert shapes.titles("drain") and shapes.titles("handover")
    assert no_slurm.asked == ["101"]  # the run's last job, as status asks
    assert [p.name for p in tmp_path.iterdir()] == sorted(["ckpt", "run.html"])  # no temp


def test_status_html_never_writes_through_a_link(
    tmp_path: Path, no_slurm: Jobs, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "ckpt"
    preempted_once(folder)
    target = tmp_path / "theirs.txt"
    target.write_text("keep")
    link = tmp_path / "run.html"
    link.symlink_to(target)
    assert main(["status", "100", "--checkpoint-dir", str(folder), "--html", str(link)]) == 2
    err = capsys.readouterr().err
    assert err == f"slurmpre: error: --html '{link}' is a link: name the file itself\n"
    assert target.read_text() == "keep" and link.is_symlink()


@pytest.mark.parametrize(
    ("args", "code", "said"),
    [
        (
            ["100", "--html", "{tmp}/missing/run.html"],
            1,
            "--html '{tmp}/missing/run.html': cannot write it: No such file or directory",
        ),
        (["999", "--html", "{tmp}/run.html"], 2, "no job '999' in the ledger of '{tmp}/ckpt'"),
        (
            ["100", "--json", "--html", "{tmp}/run.html"],
            2,
            "--html writes a page once: not with --follow or --json",
        ),
    ],
)
def test_status_html_bad_input_is_one_line(
    tmp_path: Path,
    no_slurm: Jobs,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    code: int,
    said: str,
) -> None:
    folder = tmp_path / "ckpt"
    preempted_once(folder)
    given = [a.format(tmp=tmp_path) for a in args]
    assert main(["status", *given, "--checkpoint-dir", str(folder)]) == code
    err = capsys.readouterr().err
    assert said.format(tmp=tmp_path) in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "run.html").exists()


def test_the_local_tier_and_an_in_place_restart_are_drawn_where_they_happened(
    tmp_path: Path,
) -> None:
    """With `local_dir`: the save on rank 0's node, each successor node's pull (a failed
    one says why), the flush into the folder; then a node released in place, and the
    move to standard nodes the placement decided."""
    ledger = Ledger(tmp_path)
    for r in [
        Submitted(job="7", name="big", time=T0),
        Start(job="7", attempt=0, nodes=("p1", "p2"), time=T0 + 5),
        Saved(job="7", attempt=0, step=10, path="/l/10", seconds=1.5, after_notice=True,
              time=T0 + 50),
        Checkpoint(job="7", attempt=0, step=10, path="/c/10", after_notice=True, seconds=1.5,
                   flush_seconds=30.0, time=T0 + 80),
        Placed(job="7", attempt=0, where="standard", why="3 preemptions", decided_at=T0 + 51),
        Successor(job="7", attempt=0, successor="8", excluded=(), why=None,
                  submitted_at=T0 + 52),
        End(job="7", attempt=0, exit_code=0, seconds=50.0, time=T0 + 55),
        Pulled(job="8", attempt=0, node=0, step=10, ok=True, seconds=4.0, bytes=1,
               time=T0 + 64),
        Pulled(job="8", attempt=0, node=1, step=10, ok=False, seconds=0.5, bytes=0,
               why="refused", time=T0 + 61),
        Start(job="8", attempt=0, nodes=("s1", "s2"), step=10, time=T0 + 65),
        InPlace(job="8", attempt=0, kept=("s1",), released=("s2",), release_s=0.5,
                requested_at=T0 + 90, released_at=T0 + 91, why="drain of s2"),
        Start(job="8", attempt=0, in_place=1, nodes=("s1",), step=20, time=T0 + 95),
        Notice(job="8", attempt=0, in_place=1, kind="time-limit", node=None, reason=None,
               seen_at=T0 + 110, first=True, time=T0 + 110),
    ]:  # fmt: skip
        ledger.append(r)
    records = ledger.records()
    st = job_status("7", "big", str(tmp_path), records, None, now=T0 + 120)
    chart = story.chart(st, records, T0 + 120)
    bars = {(b.kind, b.lane, b.start - T0, b.end - T0) for b in chart.bars}
    assert (page.Kind.SAVE, "node:p1", 48.5, 50.0) in bars
    assert (page.Kind.FLUSH, "node:p1", 50.0, 80.0) in bars
    assert (page.Kind.PULL, "node:s1", 60.0, 64.0) in bars
    assert (page.Kind.PULL, "node:s2", 60.5, 61.0) in bars
    kinds = {lane.label: lane.kind for lane in chart.lanes}
    assert kinds == {"hand-overs": "", "the run: waits, events": "", "p1": "preemptible",
                     "p2": "preemptible", "s1": "standard", "s2": "standard"}  # fmt: skip
    shapes = Shapes(page.render("big", [chart]))
    assert [t.split("\n")[0] for t in shapes.titles("pull")] == [
        "job 8 pulled step 10", "job 8 pulled step 10 failed: refused",
    ]  # fmt: skip
    (released,) = shapes.titles("removal")
    assert released.startswith("s2 released from job 8 (in place)\nat +1m31s")
    assert any(t.startswith("next job on standard: 3 preemptions") for t in shapes.titles("placed"))
    (notice,) = shapes.titles("notice")
    assert notice.startswith("notice: time-limit") and "at +1m50s" in notice


def test_a_real_runs_ledger_draws_its_nodes_drains_and_hand_overs(
    tmp_path: Path, no_slurm: Jobs
) -> None:
    """The ledger slurmpre wrote on the sandbox in the drill of seed 1398317274 (two drains
    at start-up, one mid-checkpoint, three hand-overs), read from its folder as `status
    --html` reads any."""
    import gzip
    import json

    from tests.drill.test_overlaps import RECORDED

    doc = json.loads(gzip.decompress(RECORDED.read_bytes()))
    folder = tmp_path / "ckpt"
    ledger = Ledger(folder)
    for raw in doc["runs"]["slurmpre"]["ledger"]:
        ledger.append(Record.from_json(raw))
    out = tmp_path / "run.html"
    assert main(["status", "2", "--checkpoint-dir", str(folder), "--html", str(out)]) == 0
    shapes = Shapes(out.read_text())
    lanes = [t for t in shapes.texts if t.endswith("(preemptible)")]
    assert lanes == ["gpu-preemptible-dp-1 (preemptible)", "gpu-preemptible-dp-2 (preemptible)"]
    drains = [t.split(" (job")[0] for t in shapes.titles("drain")]
    assert drains == [f"drain of gpu-preemptible-dp-{n} (preempted)" for n in (1, 2, 1)]
    assert [t.split("\n")[0] for t in shapes.titles("handover")] == [
        "hand-over: job 2 -> job 3",
        "hand-over: job 3 -> job 4",
        "hand-over: job 4 -> job 5",
    ]
    trained = {t.split("\n")[0] for t in shapes.titles("train")}
    assert trained == {f"job {j} attempt 0" for j in (2, 3, 4, 5)}
