"""The one table of spec keys (#38, #50): the spec, the wrapper and the docs derive from it."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from slurmpre import keys
from slurmpre.folder import access
from slurmpre.job.start.args import RunOptions, parse_args
from slurmpre.job.start.limits import Limits
from slurmpre.job.start.options import WatchConfig
from slurmpre.login.parsers import PARSERS
from slurmpre.login.render import launch_argv
from slurmpre.login.spec import JobSpec, load, validate

DOCS = Path(__file__).parents[1] / "docs" / "spec.md"
EXAMPLES = Path(__file__).parents[1] / "examples"


def test_jobspec_is_the_tables_keys_in_its_order_with_its_defaults() -> None:
    fields = dataclasses.fields(JobSpec)
    assert [f.name for f in fields] == [k.name for k in keys.KEYS]
    for f, k in zip(fields, keys.KEYS, strict=True):
        if f.default is not dataclasses.MISSING:
            assert f.default == k.default, f.name
        elif f.default_factory is not dataclasses.MISSING:
            assert f.default_factory() == k.default, f.name
        else:
            assert k.default is keys.REQUIRED, f.name


def test_every_key_names_a_parser_and_every_parser_is_named() -> None:
    assert {k.parse for k in keys.KEYS} == set(PARSERS)


def test_docs_spec_md_holds_the_table_as_it_is() -> None:
    """docs/spec.md's reference table is `keys.markdown()`: `python -m slurmpre.keys` writes
    it. A key, default or meaning changed in one place only fails here."""
    assert keys.markdown() in DOCS.read_text()


def held(opts: RunOptions, k: keys.Key) -> Any:
    """What the wrapper's options hold for the key, in the part the table names."""
    part = {"": opts, "watch": opts.watch, "goals": opts.watch.goals, "limits": opts.limits}
    return getattr(part[k.part], k.attr or k.name)


def test_the_wrappers_defaults_are_the_specs() -> None:
    """A hand-run wrapper, given no option, runs as a job of the default spec would; the
    parts it fills, made by hand, hold the same defaults."""
    parsed = parse_args(["--checkpoint-dir=/c", "--", "true"])
    for k in keys.wrapper_options():
        if k.kind == "switch":
            assert held(parsed, k) is k.default, k.name
        elif not k.convert:
            assert held(parsed, k) == k.wrapper_default, k.name
    assert parsed.watch == WatchConfig()
    assert parsed.limits == Limits()
    assert parsed.watch.margin == keys.BY_NAME["safety_margin"].default == 30


def test_every_key_the_wrapper_takes_comes_back_from_the_batch_script() -> None:
    """Each key with a flag is written by the batch script and read back into the part
    the table names, with the spec's value (a key dropped between the spec and the job,
    as `spare_overlap = false` once was, fails here)."""
    raw = {
        "name": "job", "command": ["python", "t.py"], "nodes": "2-4", "launcher": "plain",
        "nproc_per_node": 2, "warn_before_end": 120, "poll_interval": 2, "preempt_window": 200,
        "safety_margin": 20, "watch": True, "in_place": True, "spare_nodes": 1,
        "spare_overlap": False, "grow_settle": 7, "grow_min_gain": 3, "max_restarts": 9,
        "max_stalled_restarts": 5, "max_preemptions": 11, "total_steps": 1000,
        "fallback_after": 4, "max_wait": 600, "max_cost": 50, "resume_arg": "--resume",
        "file_access": "group",
    }  # fmt: skip
    spec = validate(raw, user="alice", python="/opt/venv/bin/python")
    argv = launch_argv(spec)
    parsed = parse_args(argv[argv.index("run") :])
    checked = 0
    for k in keys.KEYS:
        if not k.flag or k.convert or k.writes.startswith("elastic"):
            continue
        value = getattr(spec, k.name)
        assert held(parsed, k) == (keys.as_text(value) if k.kind == "choice" else value), k.name
        checked += 1
    assert checked >= 20
    assert (parsed.watch.min_nodes, parsed.watch.grow_to) == (2, 4)
    assert parsed.file_access == access.GROUP


# A launch line written before the keys were written in the table's order (the wrapper's
# options then came in an order of their own): a successor resumes from a script recorded
# then, so the wrapper reads it as the same run.
OLD_FINETUNE = (
    "run --launcher torchrun --checkpoint-dir=/home/alice/checkpoints/llama-finetune "
    "--resume-arg=--resume-from --poll-interval 5 --window 300 --safety-margin 30 "
    "--time-warning 300 --min-nodes 2 --grow-to 4 -- python train.py --config "
    "configs/finetune.yaml"
)


def test_a_script_rendered_before_reads_as_one_rendered_now() -> None:
    spec = load(EXAMPLES / "finetune.toml", user="alice", python="/opt/venv/bin/python")
    argv = launch_argv(spec)
    assert argv[argv.index("run") :] != OLD_FINETUNE.split()
    assert parse_args(OLD_FINETUNE.split()) == parse_args(argv[argv.index("run") :])
