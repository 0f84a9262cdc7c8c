"""docs/architecture.md is drawn from the tree: every module it names exists, every module
of the package is named, and its table of ledger records is the code's."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

from slurmpre.folder import records

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "architecture.md").read_text()
PACKAGE = ROOT / "slurmpre"
NAMED = {n for n in re.findall(r"`([\w/]+\.py)`", PAGE) if not n.startswith("tests/")}


def modules() -> set[str]:
    return {
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if p.name not in ("__init__.py", "__main__.py")
    }


def test_every_module_the_page_names_exists() -> None:
    assert NAMED, "the page names no module"
    assert sorted(NAMED - modules()) == []


def test_every_module_of_the_package_is_on_the_page() -> None:
    assert sorted(modules() - NAMED) == []


def test_the_table_of_records_is_the_codes() -> None:
    rows = dict(re.findall(r"^\| `(\w+)` \| [^|]+ \| (.+) \|$", PAGE, re.MULTILINE))
    assert set(rows) == {cls.__name__ for cls in records.EVENTS.values()}
    skip = {"job", "time", "extra", "read_keys", "attempt", "in_place"}
    for cls in records.EVENTS.values():
        fields = {f.name for f in dataclasses.fields(cls)} - skip
        named = set(re.findall(r"`(\w+)`", rows[cls.__name__]))
        assert fields <= named, (cls.__name__, sorted(fields - named))


def test_the_login_side_imports_nothing_of_the_sandbox() -> None:
    """The sandbox is a rehearsal: the login side runs on any cluster without it (what a
    sandbox's nodes can run is asked by `cli/`)."""
    found = []
    for path in sorted((PACKAGE / "login").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            found += [f"{path.name}: {n}" for n in names if n.startswith("slurmpre.sandbox")]
    assert found == []
