"""One error hierarchy (#38): every exception slurmpre defines is a SlurmpreError, so the
one handler of the command line turns each into one line and its exit code."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import slurmpre
from slurmpre.errors import SlurmpreError

# Modules that need what the test environment may lack (torch, a framework), or that run
# something on import: none of them defines an exception.
SKIP = {"slurmpre.__main__", "slurmpre.job.__main__", "slurmpre.drill.train"}


def test_every_exception_slurmpre_defines_is_a_slurmpre_error() -> None:
    found = []
    for info in pkgutil.walk_packages(slurmpre.__path__, "slurmpre."):
        if info.name in SKIP or info.name.startswith("slurmpre.integrations."):
            continue
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == info.name and issubclass(cls, BaseException):
                found.append(cls)
    assert len(found) >= 15, found  # the hierarchy, and the ones beside their modules
    outside = [
        f"{c.__module__}.{c.__qualname__}" for c in found if not issubclass(c, SlurmpreError)
    ]
    assert outside == []
