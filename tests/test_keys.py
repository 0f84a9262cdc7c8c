"""The one table of spec keys (#38): the spec, the wrapper and the docs derive from it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from slurmpre import keys
from slurmpre.job.start.args import parse_args
from slurmpre.login.parsers import PARSERS
from slurmpre.login.spec import JobSpec

DOCS = Path(__file__).parents[1] / "docs" / "spec.md"


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


def test_the_wrappers_defaults_are_the_specs() -> None:
    """A hand-run wrapper, given no option, watches as a job of the default spec would."""
    parsed = parse_args(["--checkpoint-dir=/c", "--", "true"])
    spec = {k.name: k for k in keys.KEYS}
    assert parsed.watch.interval == spec["poll_interval"].default
    assert parsed.watch.window == spec["preempt_window"].default
    assert parsed.watch.margin == spec["safety_margin"].default
    assert parsed.watch.time_warning == spec["warn_before_end"].default
    assert parsed.watch.restart == spec["restart"].default
    assert parsed.max_restarts == spec["max_restarts"].default
    assert parsed.launcher == spec["launcher"].default.value


def test_the_batch_script_writes_every_key_the_wrapper_takes() -> None:
    """A key with a wrapper flag that the batch script never writes would be dropped
    between the spec and the job (as `spare_overlap = false` once was)."""
    assert {k.name for k in keys.KEYS if k.flag} == set(keys.WRITTEN)
