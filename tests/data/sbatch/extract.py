"""sbatch's long options, read from Slurm's own ``src/common/slurm_opt.c``, one release each.

    python tests/data/sbatch/extract.py 22.05=PATH/slurm_opt.c 24.11=PATH/slurm_opt.c ... \
        > slurmpre/login/sbatch_releases.py && ruff format slurmpre/login/sbatch_releases.py

An option belongs to sbatch when it is in ``common_options[]`` with a ``set_func`` or a
``set_func_sbatch`` (as ``slurm_option_table_create`` builds getopt_long's table).
Options that share a ``val`` are one option under several names (``tasks-per-node``
is ``ntasks-per-node``); the first name in order is the one slurmpre calls it by.
The sources are Debian's (``apt-get source slurm-wlm=VERSION``); a release whose source
is not at hand can be given as ``26.05=@24.11+name:kind,...``: another release's table
with names added or their argument kind changed, as that release's real sbatch says
(its ``--help``, and getopt's answers to ``--NAME --usage`` and ``--NAME=1 --usage``;
tests/versions/test_sbatch_options.py asks every release's sbatch the same for the
whole table). Debian ships no source for 26.05.5 in its pool, so 26.05 is made so:

    python tests/data/sbatch/extract.py 22.05=... 24.11=... \
        26.05=@24.11+container-type:R,spread-segments:N,get-user-env:N,requeue:O
"""

from __future__ import annotations

import itertools
import re
import sys
from pathlib import Path

_BLOCK = re.compile(r"static slurm_cli_opt_t (slurm_opt_\w+) = \{(.*?)\n\};", re.S)
_FIELD = re.compile(r"\.(\w+)\s*=\s*([^,\n]+),?")
_ARG = {"no_argument": "N", "required_argument": "R", "optional_argument": "O"}


def extract(text: str) -> dict[str, tuple[str, str]]:
    """{long name: (argument kind N/R/O, val)} of every option sbatch takes."""
    blocks = {ident: dict(_FIELD.findall(body)) for ident, body in _BLOCK.findall(text)}
    listed = re.search(r"common_options\[\]\s*=\s*\{(.*?)\};", text, re.S)
    if listed is None:
        raise SystemExit("no common_options[] in the source")
    out: dict[str, tuple[str, str]] = {}
    for ident in re.findall(r"&(slurm_opt_\w+)", listed.group(1)):
        fields = blocks[ident]
        name = fields.get("name", "NULL").strip()
        if name == "NULL" or not ("set_func" in fields or "set_func_sbatch" in fields):
            continue
        out[name.strip('"')] = (_ARG[fields["has_arg"].strip()], fields["val"].strip())
    return out


def main(args: list[str]) -> None:
    tables: dict[str, dict[str, tuple[str, str]]] = {}
    for arg in args:
        release, _, where = arg.partition("=")
        if where.startswith("@"):
            base, _, added = where[1:].partition("+")
            table = dict(tables[base])
            for item in filter(None, added.split(",")):
                name, _, kind = item.partition(":")
                table[name] = (kind, table[name][1] if name in table else f"NEW_{name}")
            tables[release] = table
        else:
            tables[release] = extract(Path(where).read_text(encoding="utf-8"))
    print('"""sbatch\'s long options in each supported Slurm release, read from its own')
    print("src/common/slurm_opt.c by tests/data/sbatch/extract.py (see there): generated,")
    print('do not edit. N: no argument, R: required, O: optional (only as --opt=value)."""')
    print()
    names = list(tables)
    first = names[0]
    print("# The first release's whole table; each later one as its changes to the one before it.")
    print(f'FIRST = "{first}"')
    print("FIRST_TABLE: dict[str, str] = {")
    for name in sorted(tables[first]):
        print(f'    "{name}": "{tables[first][name][0]}",')
    print("}")
    print("# release: (the release before it, names added or of another kind, names removed)")
    print("CHANGES: dict[str, tuple[str, dict[str, str], tuple[str, ...]]] = {")
    for before, release in itertools.pairwise(names):
        old, new = tables[before], tables[release]
        changed = {n: new[n][0] for n in sorted(new) if n not in old or old[n][0] != new[n][0]}
        removed = sorted(n for n in old if n not in new)
        print(f'    "{release}": (')
        print(f'        "{before}",')
        items = ", ".join(f'"{n}": "{k}"' for n, k in changed.items())
        print("        {" + items + "},")
        print("        (" + "".join(f'"{n}", ' for n in removed) + "),")
        print("    ),")
    print("}")
    print()
    print()
    print("def _releases() -> dict[str, dict[str, str]]:")
    print("    out = {FIRST: dict(FIRST_TABLE)}")
    print("    for release, (before, changed, removed) in CHANGES.items():")
    print("        table = {n: k for n, k in out[before].items() if n not in removed}")
    print("        out[release] = {**table, **changed}")
    print("    return out")
    print()
    print()
    print("RELEASES: dict[str, dict[str, str]] = _releases()")
    aliases: dict[str, str] = {}
    for table in tables.values():
        by_val: dict[str, list[str]] = {}
        for name, (_, val) in table.items():
            by_val.setdefault(val, []).append(name)
        for names in by_val.values():
            first, *others = sorted(names)
            for other in others:
                aliases[other] = first
    print("# Names that are another option's second name (they share its val).")
    print("ALIASES: dict[str, str] = {")
    for name in sorted(aliases):
        print(f'    "{name}": "{aliases[name]}",')
    print("}")
    shorts: dict[str, str] = {}
    for table in tables.values():
        for name, (_, val) in table.items():
            if len(val) == 3 and val[0] == val[2] == "'":
                shorts[val[1]] = name
    print("SHORT: dict[str, str] = {")
    for letter in sorted(shorts):
        print(f'    "{letter}": "{shorts[letter]}",')
    print("}")


if __name__ == "__main__":
    main(sys.argv[1:])
