"""A run's timeline as one self-contained HTML page (`slurmpre status NAME --html FILE`).

What to draw is a `Chart`: lanes (a node the run held, or the run's own hand-overs and
waits), bars on them (training, checkpoint writes, waits), marks (a drain, a node
released, a grow) and the steps over time. `render` draws charts one under the other on
one time axis, each from its own origin (the drill's two sides); it is pure. Plain SVG
inline, a ``<title>`` on each bar and mark for its times: nothing is fetched, no script
runs (the page's Content-Security-Policy forbids both), and every string is escaped, since
a ledger in a shared folder is a message from whoever could write it.
"""

from __future__ import annotations

import enum
import html
import os
import stat
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from slurmpre.atomic import write_atomic
from slurmpre.errors import SlurmpreError, UsageError


class Kind(enum.Enum):
    """What a bar or a mark stands for, with its colour and its name in the legend."""

    TRAIN = ("#4c9f70", "training")
    HELD = ("#c9d7cf", "held, not training (a spare)")
    WAIT = ("#e8b04b", "waiting (start-up, a predecessor, capacity, a requeue)")
    HANDOVER = ("#8e7cc3", "hand-over to the next job")
    CHECKPOINT = ("#2f6db5", "checkpoint write")
    SAVE = ("#5fa8e8", "save on the node")
    PULL = ("#1bb0b0", "pull from the nodes before")
    FLUSH = ("#9dbbdf", "flush into the folder")
    DRAIN = ("#d62728", "drain")
    NOTICE = ("#e377c2", "notice: the time limit, a grow, a move")
    REMOVAL = ("#111111", "node removed or released")
    RESIZE = ("#ff7f0e", "grow, shrink, spare swap")
    PLACED = ("#7f4f24", "placement (preemptible or standard)")
    END = ("#444444", "end")

    @property
    def colour(self) -> str:
        return self.value[0]

    @property
    def legend(self) -> str:
        return self.value[1]


@dataclass(frozen=True)
class Lane:
    key: str  # what bars and marks name it by ("node:NAME", "handovers", ...)
    label: str
    kind: str = ""  # "preemptible", "standard", or "" for the run's own lanes


@dataclass(frozen=True)
class Bar:
    lane: str
    start: float
    end: float
    kind: Kind
    label: str  # drawn inside when it fits, and first in the tooltip
    detail: str = ""


@dataclass(frozen=True)
class Mark:
    lane: str
    at: float
    kind: Kind
    label: str


@dataclass(frozen=True)
class Chart:
    title: str
    origin: float  # wall time at the left edge (a submission or the first start)
    lanes: tuple[Lane, ...]
    bars: tuple[Bar, ...] = ()
    marks: tuple[Mark, ...] = ()
    steps: tuple[tuple[float, int], ...] = ()  # (wall time, step), in time order
    steps_label: str = "steps"
    facts: tuple[str, ...] = ()  # lines under the title: state, cost so far

    @property
    def end(self) -> float:
        """The last moment the chart draws."""
        times = [b.end for b in self.bars] + [m.at for m in self.marks] + [t for t, _ in self.steps]
        return max([self.origin, *times])


WIDTH = 1200
LEFT = 260  # the lanes' labels
RIGHT = 30
LANE = 22
STEPS_H = 90
CHAR = 6.5  # pixels: the width of a character of a bar's name, about
MIN_BAR = 2.0  # pixels: a write of no recorded length is still seen
MAX_POINTS = 1500  # a step line is thinned to this many points


def clean(text: str) -> str:
    """``text`` as the page shows it: control characters written as escapes, then
    HTML-escaped (quotes too: it may land in an attribute)."""
    shown = text if text.isprintable() else repr(text)[1:-1]
    return html.escape(shown, quote=True)


def _tip(*lines: str) -> str:
    """A tooltip: each line cleaned, one under the other."""
    return "\n".join(clean(line) for line in lines if line)


def clock(seconds: float) -> str:
    """``+1h02m``, ``+3m05s``, ``+42s``: time since a chart's origin."""
    s = round(seconds)
    sign, s = ("-", -s) if s < 0 else ("+", s)
    if s >= 3600:
        return f"{sign}{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{sign}{s // 60}m{s % 60:02d}s"
    return f"{sign}{s}s"


def _utc(t: float) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))
    except (OverflowError, ValueError, OSError):  # a ledger's time no calendar holds
        return f"{t:g} s after 1970"


def _tick(span: float) -> float:
    """A round step between axis ticks, ten at most over ``span`` seconds (a day's steps
    beyond ten days: a ledger's times are finite, not plausible)."""
    for step in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 43200):
        if span / step <= 10:
            return float(step)
    return max(86400.0, span / 10)


def _chart_svg(chart: Chart, span: float) -> str:
    plot = WIDTH - LEFT - RIGHT
    top = 4
    height = top + LANE * len(chart.lanes) + (STEPS_H if chart.steps else 0) + 28

    def x(t: float) -> float:
        return LEFT + max(0.0, min(t - chart.origin, span)) / span * plot

    row = {lane.key: top + i * LANE for i, lane in enumerate(chart.lanes)}
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" '
        f'width="100%" role="img" aria-label="{clean(chart.title)}">'
    ]
    for lane in chart.lanes:
        y = row[lane.key]
        shade = {"standard": "#fbf3e4", "preemptible": "#f3f7f4"}.get(lane.kind, "#f6f6f6")
        out.append(
            f'<rect x="{LEFT}" y="{y}" width="{plot}" height="{LANE - 2}" fill="{shade}">'
            f"<title>{clean(lane.label)}</title></rect>"
        )
        suffix = f" ({lane.kind})" if lane.kind else ""
        out.append(
            f'<text x="{LEFT - 6}" y="{y + LANE - 8}" text-anchor="end" class="lane">'
            f"{clean(_short(lane.label, 30) + suffix)}</text>"
        )
    bottom = top + LANE * len(chart.lanes)
    step = _tick(span)
    t = 0.0
    while t <= span + 1e-9:
        tx = LEFT + t / span * plot
        out.append(
            f'<line x1="{tx:.1f}" y1="{top}" x2="{tx:.1f}" y2="{height - 22}" '
            f'class="grid"/><text x="{tx:.1f}" y="{height - 8}" text-anchor="middle" '
            f'class="axis">{clock(t)}</text>'
        )
        t += step
    labels: list[str] = []  # over every bar: a checkpoint's write does not hide its name
    taken: dict[str, float] = {}  # each lane's last name ends here
    for bar in chart.bars:
        if bar.lane not in row:
            continue
        x0, x1 = x(bar.start), x(max(bar.end, bar.start))
        w = max(x1 - x0, MIN_BAR)
        y = row[bar.lane] + (5 if bar.kind in (Kind.CHECKPOINT, Kind.SAVE, Kind.FLUSH) else 2)
        h = LANE - (12 if bar.kind in (Kind.CHECKPOINT, Kind.SAVE, Kind.FLUSH) else 6)
        tip = _tip(
            bar.label,
            f"{clock(bar.start - chart.origin)} to "
            f"{clock(bar.end - chart.origin)} ({bar.end - bar.start:.1f} s), from "
            f"{_utc(bar.start)}",
            bar.detail,
        )
        out.append(
            f'<rect x="{x0:.1f}" y="{y}" width="{w:.1f}" height="{h}" rx="2" '
            f'fill="{bar.kind.colour}" class="{bar.kind.name.lower()}">'
            f"<title>{tip}</title></rect>"
        )
        room = int(w / CHAR)
        free = x0 >= taken.get(bar.lane, 0.0)  # bars that overlap: the first one's name
        if bar.kind in (Kind.TRAIN, Kind.WAIT, Kind.HANDOVER) and room >= 6 and free:
            name = _short(bar.label, room)
            taken[bar.lane] = x0 + 6 + len(name) * CHAR
            labels.append(
                f'<text x="{x0 + 3:.1f}" y="{row[bar.lane] + LANE - 8}" class="in">'
                f"{clean(name)}</text>"
            )
    out += labels
    for mark in chart.marks:
        if mark.lane not in row:
            continue
        mx, y = x(mark.at), row[mark.lane]
        tip = _tip(mark.label, f"at {clock(mark.at - chart.origin)}, {_utc(mark.at)}")
        shape = (
            f'<path d="M{mx:.1f},{y + 1} l5,9 l-5,9 l-5,-9 z"'
            if mark.kind != Kind.REMOVAL
            else f'<path d="M{mx - 5:.1f},{y + 3} l10,14 m0,-14 l-10,14" stroke-width="2.5"'
        )
        out.append(
            f'<g class="mark {mark.kind.name.lower()}">{shape} fill="{mark.kind.colour}" '
            f'stroke="{mark.kind.colour}"/><line x1="{mx:.1f}" y1="{y}" x2="{mx:.1f}" '
            f'y2="{y + LANE - 2}" stroke="{mark.kind.colour}"/>'
            f"<title>{tip}</title></g>"
        )
    if chart.steps:
        out.append(_steps_svg(chart, x, bottom + 6, STEPS_H - 12))
    out.append("</svg>")
    return "\n".join(out)


def _steps_svg(chart: Chart, x: Callable[[float], float], y0: float, h: float) -> str:
    points = _thin(chart.steps)
    most = max(s for _, s in points) or 1
    # A step holds until the next one is known: a resume from an older checkpoint drops.
    held = [points[0], *((t, s) for (t, _), (_, s) in zip(points[1:], points, strict=False))]
    path = [p for pair in zip(held, points, strict=True) for p in pair]
    coords = " ".join(f"{x(t):.1f},{y0 + h - s / most * h:.1f}" for t, s in path)
    label = f"{chart.steps_label} (0 to {most})"
    return (
        f'<rect x="{LEFT}" y="{y0}" width="{WIDTH - LEFT - RIGHT}" height="{h}" '
        f'fill="#fafafa"/><text x="{LEFT - 6}" y="{y0 + h / 2}" text-anchor="end" '
        f'class="lane">{clean(chart.steps_label)}</text>'
        f'<text x="{LEFT - 6}" y="{y0 + 10}" text-anchor="end" class="axis">{most}</text>'
        f'<polyline points="{coords}" fill="none" stroke="#333" stroke-width="1.5">'
        f"<title>{clean(label)}</title></polyline>"
    )


def _thin(points: tuple[tuple[float, int], ...]) -> list[tuple[float, int]]:
    if len(points) <= MAX_POINTS:
        return list(points)
    every = len(points) / MAX_POINTS
    return [points[int(i * every)] for i in range(MAX_POINTS)] + [points[-1]]


def _short(text: str, room: int) -> str:
    return text if len(text) <= room else text[: max(room - 1, 1)] + "…"


_STYLE = """body{font:13px system-ui,sans-serif;margin:16px;color:#222;background:#fff}
body{max-width:1200px}h1{font-size:18px;margin:0 0 4px}h2{font-size:15px;margin:18px 0 2px}
p.facts{margin:2px 0;color:#444}.lane{font-size:12px;fill:#222}.axis{font-size:11px;fill:#666}
.in{font-size:11px;fill:#fff;pointer-events:none}.grid{stroke:#e2e2e2}
ul.legend{list-style:none;padding:0;margin:6px 0;display:flex;flex-wrap:wrap;gap:4px 14px}
ul.legend span{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-2px}"""


def render(title: str, charts: Sequence[Chart], notes: Sequence[str] = ()) -> str:
    """One HTML page: ``charts`` one under the other, each from its own origin, on one
    time axis as long as the longest."""
    span = max([c.end - c.origin for c in charts] + [1.0])
    used = {b.kind for c in charts for b in c.bars} | {m.kind for c in charts for m in c.marks}
    legend = "".join(
        f'<li><span style="background:{k.colour}"></span>{clean(k.legend)}</li>'
        for k in Kind
        if k in used
    )
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        # Nothing is fetched and nothing runs, whatever a ledger holds.
        '<meta http-equiv="Content-Security-Policy" '
        "content=\"default-src 'none'; style-src 'unsafe-inline'\">",
        f"<title>{clean(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{clean(title)}</h1>",
        *[f'<p class="facts">{clean(n)}</p>' for n in notes],
        f'<ul class="legend">{legend}</ul>',
    ]
    for chart in charts:
        parts.append(f"<h2>{clean(chart.title)}</h2>")
        parts += [f'<p class="facts">{clean(f)}</p>' for f in chart.facts]
        parts.append(_chart_svg(chart, span))
    parts.append(
        '<p class="facts">Hover a bar or a mark for its times. Times are from '
        "each run's own start.</p></body></html>\n"
    )
    return "\n".join(parts)


def write(path: Path, page: str) -> None:
    """Write ``page`` at ``path`` whole (a new file renamed into place), never through a
    link: a link or anything but a regular file at ``path`` is refused."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise SlurmpreError(f"--html {str(path)!r}: {exc.strerror}") from None
    else:
        if stat.S_ISLNK(st.st_mode):
            raise UsageError(f"--html {str(path)!r} is a link: name the file itself")
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(f"--html {str(path)!r} is not a regular file")
    try:
        write_atomic(path, page)
    except OSError as exc:
        raise SlurmpreError(f"--html {str(path)!r}: cannot write it: {exc.strerror}") from None
