"""Slurm hostlist expressions (``gpu-dp-[1-3,7],login1``), expanded without calling Slurm."""

from __future__ import annotations

import re

from slurmpre.errors import SlurmError

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def _split_top(expr: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in expr:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise SlurmError(f"bad hostlist {expr!r}: unbalanced ']'")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise SlurmError(f"bad hostlist {expr!r}: unbalanced '['")
    parts.append("".join(cur))
    return [p for p in parts if p]


def _expand_one(item: str, whole: str) -> list[str]:
    start = item.find("[")
    if start < 0:
        return [item]
    end = item.find("]", start)
    prefix, body, rest = item[:start], item[start + 1 : end], item[end + 1 :]
    tails = _expand_one(rest, whole) if rest else [""]
    out: list[str] = []
    for piece in body.split(","):
        m = _RANGE.match(piece)
        if not m:
            raise SlurmError(f"bad hostlist {whole!r}: range {piece!r}")
        lo, hi = m.group(1), m.group(2) or m.group(1)
        if int(hi) < int(lo):
            raise SlurmError(f"bad hostlist {whole!r}: range {piece!r} goes down")
        width = len(lo) if lo.startswith("0") else 0
        for n in range(int(lo), int(hi) + 1):
            num = str(n).zfill(width)
            out.extend(prefix + num + tail for tail in tails)
    return out


def expand(expr: str) -> list[str]:
    """``"n[01-03],m1"`` -> ``["n01", "n02", "n03", "m1"]``, in Slurm's order."""
    expr = expr.strip()
    if expr in ("", "(null)", "None"):
        return []
    names: list[str] = []
    for item in _split_top(expr):
        names.extend(_expand_one(item, expr))
    return names
