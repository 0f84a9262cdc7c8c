"""Property: a spec built from hostile strings is refused with a SpecError or rendered safely.

Safe means: the script passes ``bash -n``; its ``#SBATCH`` lines are exactly the
ones the spec asks for (no value adds a directive or changes a managed one);
every environment line is one ``export NAME=VALUE`` word that gives back the
value; the wrapper's command line reads back the spec's values. Hypothesis
prints the failing example when one breaks; its random draws come from the test's
`seed` (printed first; SLURMPRE_TEST_SEED draws the same examples again).
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import hypothesis
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from slurmpre.errors import UsageError
from slurmpre.job.start.args import parse_args
from slurmpre.login import sbatch_options
from slurmpre.login.render import command_line, launch_argv, python_bin, render
from slurmpre.login.spec import SpecError, validate

PIECES = [
    "a", "b", "Z", "0", "7", "-", "--", "_", ".", "/", " ", "'", '"', "\\", "$", "$(id)", "`id`",
    ";", "&", "|", "#", "#SBATCH --nodes=5", "--nodes=5", "--no-requeue", "-N5", "-HN5",
    "--constr=standard", "%", "%j", "\n", "\r", "\t", "\0", "\u2028", "\u2029", "\x85", "é",
    "中", "=", ":", ",", "*", "[", "]", "{{", "}}", "{%", "%}", "!",
]  # fmt: skip

hostile = st.lists(st.sampled_from(PIECES), min_size=0, max_size=8).map("".join)
maybe = st.one_of(st.none(), hostile)


def mostly(valid: list[Any]) -> st.SearchStrategy[Any]:
    """Valid values most of the time, so most examples render; hostile text sometimes."""
    return st.one_of(
        st.sampled_from(valid), st.sampled_from(valid), st.sampled_from(valid), hostile
    )


# Free text a user types (names, commands, paths, env values, patterns) is hostile;
# structured keys are mostly valid so that most examples reach the template.
OPTIONAL: dict[str, st.SearchStrategy[Any]] = {
    "nodes": mostly([1, 2, "2-4", "1-100"]),
    "partition": mostly(["gpu", "a.b_c-1"]),
    "constraint": mostly(["preemptible", "standard", "a&b"]),
    "mem": mostly(["64G", "0"]),
    "time": mostly(["90", "2-00:00:00"]),
    "array": mostly(["0-9", "1,3%2"]),
    "checkpoint_dir": hostile.map(lambda s: "/" + s),
    "log_dir": hostile.map(lambda s: "/" + s),
    "resume_arg": hostile,
    "drain_reason": hostile,
    "notice_signal": mostly(["USR1", "TERM"]),
    "env": st.dictionaries(mostly(["A", "B_2", "_X"]), hostile, max_size=3),
    "extra_sbatch": st.lists(
        mostly(
            [
                *["--mail-type=END", "--comment 'x y'", "-H"],
                # ... and what sbatch would read as an option slurmpre manages:
                *["--mail-type=END --nodes=5", "-HN5", "--no-req", "--constr=standard", "-c 4"],
                # ... once quotes and backslashes are read as sbatch reads them, or aliases:
                *["'--quiet --nodes=5'", "'--no-requeue '", '"--nodes"=2', "--no\\-requeue"],
                *["--tasks-per-node=2", "--tasks 2", '--comment="a\\\\b"', "-kN5"],
            ]
        ),
        max_size=3,
    ),
    "warn_before_end": mostly([0, 60, 300]),
    "poll_interval": mostly([1, 2.5, 5]),
    "gpus_per_node": mostly([0, 1, 8]),
    "launcher": mostly(["torchrun", "plain"]),
}


@st.composite
def raw_specs(draw: st.DrawFn) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "name": draw(st.one_of(hostile, st.just("job"))),
        "command": draw(st.lists(hostile, min_size=1, max_size=4).map(lambda c: ["python", *c])),
    }
    for key, strategy in OPTIONAL.items():
        if draw(st.integers(0, 2)) == 0:
            raw[key] = draw(strategy)
    return raw


def expand(value: str, environ: dict[str, str]) -> str:
    """What a value with $NAME, ${NAME} and $$ in it means, as the spec's docs say."""
    return re.sub(
        r"\$(\$|([A-Za-z_][A-Za-z0-9_]*)|\{([A-Za-z_][A-Za-z0-9_]*)\})",
        lambda m: "$" if m[1] == "$" else environ.get(m[2] or m[3], ""),
        value,
    )


def env_block_values(
    script: str, keys: list[str], environ: dict[str, str] | None = None
) -> dict[str, str]:
    """The values bash gives the spec's env keys once it has run the script's environment
    block, in an environment of ``environ`` alone."""
    start = script.index("export SLURMPRE_JOB_NAME=")
    block = script[start : script.index("\nslurmpre_attempt=", start)]
    show = "".join(f'printf "%s\\0" "${{{k}}}"\n' for k in keys)
    base = {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"} | (environ or {})
    out = subprocess.run(
        ["bash", "-c", block + "\n" + show], env=base, capture_output=True, check=True
    ).stdout
    return dict(zip(keys, out.decode().split("\0")[:-1], strict=True))


def sbatch_lines(script: str) -> list[str]:
    """The directives sbatch reads: ``#SBATCH`` lines before the first command (sbatch(1))."""
    out = []
    for line in script.split("\n"):
        if line.strip() and not line.startswith("#"):
            break
        if line.startswith("#SBATCH "):
            out.append(line[len("#SBATCH ") :])
    return out


def test_hostile_specs_are_refused_or_rendered_safely(seed: int) -> None:
    @hypothesis.seed(seed)
    @settings(
        max_examples=2000,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(raw_specs())
    def check(raw: dict[str, Any]) -> None:
        refused_or_rendered_safely(raw)

    check()


def refused_or_rendered_safely(raw: dict[str, Any]) -> None:
    try:
        spec = validate(raw, user="alice", python="/opt/venv/bin/python")
        script = render(spec)
    except (SpecError, UsageError):
        event("refused")
        return  # refused with a message: exit 2 at the CLI, never 3
    event("rendered")
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)

    directives = sbatch_lines(script)
    read = [sbatch_options.words(line) for line in directives]
    assert read == [sbatch_options.words(line, escaped_space=False) for line in directives]
    assert all(len(w) == 1 and w[0].startswith("--") for w in read)  # one option per line
    options = [w[0][2:].partition("=") for w in read]
    names = [name for name, _, _ in options]
    managed = [n for n in names if n in sbatch_options.MANAGED]
    assert len(managed) == len(set(managed)), names  # nothing set twice
    values = {name: value if eq else None for name, eq, value in options}
    assert values["job-name"] == spec.name
    assert values["nodes"] == str(spec.nodes)
    assert ("requeue" in values) == spec.requeue and ("no-requeue" in values) != spec.requeue
    assert values.get("constraint") == spec.constraint
    extra = [line for line in directives if line in spec.extra_sbatch]
    assert extra == list(spec.extra_sbatch)
    # sbatch's command line, which wins over the script and the SBATCH_* variables: the
    # options slurmpre sets, each once, with the spec's values, and nothing of extra_sbatch.
    args = command_line(spec, script)
    given = dict(word.removeprefix("--").partition("=")[::2] for word in args)
    assert len(given) == len(args) and set(given) <= {*sbatch_options.MANAGED, "chdir"}, args
    assert (given["job-name"], given["nodes"]) == (spec.name, str(spec.nodes))
    assert ("requeue" in given) == spec.requeue and ("no-requeue" in given) != spec.requeue
    assert given.get("constraint") == spec.constraint

    # The environment block: slurmpre's three exports and PATH (for a python outside the
    # system folders), then one per env key, each value shell-quoted whole (a quoted value
    # may span lines; it never starts a command), or with a $ in it, double-quoted.
    ours = 3 + (python_bin(spec.python) is not None)
    assert script.count("\nexport ") == ours + len(spec.env)
    for key, value in spec.env.items():
        if "$" not in value:
            assert f"\nexport {key}={shlex.quote(value)}\n" in script
    # Run, it gives each value back, its $NAME expanded (none of the hostile names is set
    # here) and nothing else: no command run, no word split, no glob.
    got = env_block_values(script, list(spec.env))
    assert got == {k: expand(v, {}) for k, v in spec.env.items()}

    argv = launch_argv(spec)
    opts = parse_args(argv[argv.index("run") :])
    assert opts.command == spec.command
    assert opts.resume_arg == spec.resume_arg
    assert opts.checkpoint_dir == Path(spec.checkpoint_dir)
