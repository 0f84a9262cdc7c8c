"""The package's metadata is ready for a package index: where the project lives, what it
runs on, and the README as its page (whose links tests/test_readme.py follows)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
REPOSITORY = "https://github.com/slurmpre/slurmpre"


def _project() -> dict[str, Any]:
    project: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project


def test_the_project_says_where_it_lives() -> None:
    urls = _project()["urls"]
    assert set(urls) >= {"Homepage", "Documentation", "Source", "Issues"}
    assert all(url.startswith(REPOSITORY) for url in urls.values()), urls
    docs = urls["Documentation"].removeprefix(f"{REPOSITORY}/tree/main/")
    assert (ROOT / docs).is_dir(), urls["Documentation"]


def test_the_classifiers_say_what_it_runs_on() -> None:
    project = _project()
    classifiers = set(project["classifiers"])
    supported = {f"Programming Language :: Python :: 3.{minor}" for minor in range(10, 14)}
    assert supported <= classifiers
    assert project["requires-python"] == ">=3.10"
    assert {
        "Operating System :: POSIX :: Linux",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
        "Topic :: System :: Distributed Computing",
    } <= classifiers
    # The license is an SPDX expression (PEP 639), which forbids a License :: classifier.
    assert project["license"] == "Apache-2.0"
    assert not any(c.startswith("License ::") for c in classifiers)
    assert project["keywords"]


def test_the_readme_is_the_projects_page() -> None:
    readme = _project()["readme"]
    assert readme == {"file": "README.md", "content-type": "text/markdown"}
