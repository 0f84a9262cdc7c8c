"""The timeline page in a real headless browser (chromium): what it draws is not blank.

`bin/setup` installs chromium and `bin/test` sets SLURMPRE_TEST_BROWSER=required, so
there the test fails when chromium is missing; elsewhere it is skipped."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
from slurmpre.folder.ledger import Ledger
from slurmpre.login import page, story
from slurmpre.login.status import job_status

from tests.timeline_runs import T0, preempted_once

REQUIRED = "SLURMPRE_TEST_BROWSER"  # "required": bin/test's runs must not skip this test


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get(REQUIRED) == "required":
            pytest.fail(f"chromium is missing and {REQUIRED}=required: run bin/setup")
        pytest.skip("chromium is not installed (bin/setup installs it)")
    return found


def screenshot(html: Path, png: Path, size: str = "1200,800") -> None:
    argv = [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        "--no-default-browser-check",
        f"--user-data-dir={png.parent / 'profile'}",
        f"--screenshot={png}",
        f"--window-size={size}",
        html.as_uri(),
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0 and png.is_file(), proc.stderr[-2000:]


def pixels(png: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and rows of RGB(A) pixels of an 8-bit truecolour PNG (what chromium
    writes): the chunks, zlib, and the five row filters."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, head = 8, b"", b""
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos : pos + 4])
        kind, body = png[pos + 4 : pos + 8], png[pos + 8 : pos + 8 + length]
        head = body if kind == b"IHDR" else head
        idat += body if kind == b"IDAT" else b""
        pos += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", head[:10])
    assert depth == 8 and colour in (2, 6), (depth, colour)
    bpp = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(idat), width * bpp
    rows: list[bytes] = []
    prior = bytearray(stride)
    for y in range(height):
        kind, line = (
            raw[y * (stride + 1)],
            bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)]),
        )
        if kind == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif kind == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prior, strict=True))
        elif kind == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + (left + prior[i]) // 2) & 255
        elif kind == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b, c = prior[i], prior[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prior = line
    return width, height, [bytes(r[i : i + 3]) for r in rows for i in range(0, stride, bpp)]


def test_the_page_draws_a_picture_in_a_real_browser(tmp_path: Path) -> None:
    folder = tmp_path / "ckpt"
    preempted_once(folder)
    records = Ledger(folder, view=True).records()
    st = job_status("100", "train", str(folder), records, None, now=T0 + 500)
    html = tmp_path / "run.html"
    page.write(html, page.render("a run", [story.chart(st, records, T0 + 500)]))
    png = tmp_path / "run.png"
    screenshot(html, png)
    width, height, colours = pixels(png.read_bytes())
    assert (width, height) == (1200, 800)
    white = bytes((255, 255, 255))
    inked = sum(1 for c in colours if c != white)
    # Not blank: lanes, bars and text cover part of the picture, in the legend's colours.
    assert inked > 0.05 * width * height, inked
    distinct = set(colours)
    assert len(distinct) > 20
    for kind in (page.Kind.TRAIN, page.Kind.DRAIN, page.Kind.HANDOVER):
        assert bytes.fromhex(kind.colour[1:]) in distinct, kind
