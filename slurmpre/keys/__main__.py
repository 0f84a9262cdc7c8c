"""python -m slurmpre.keys: docs/spec.md's table, to paste."""

from slurmpre.keys import markdown

print(markdown(), end="")
