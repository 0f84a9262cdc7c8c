"""One table of wrapper options: the spec, the template's argv and the wrapper agree on it."""

from __future__ import annotations

import pytest
from slurmpre import keys
from slurmpre.errors import UsageError
from slurmpre.job.start.args import parse_args
from slurmpre.login.render import launch_argv
from slurmpre.login.spec import SpecError, validate

BASE = {"name": "job", "command": ["python", "train.py"]}


def spec(**kw: object):  # type: ignore[no-untyped-def]
    return validate({**BASE, **kw}, user="alice", python="/opt/venv/bin/python")


def test_every_option_the_template_writes_is_one_the_wrapper_takes() -> None:
    full = spec(
        nodes="2-4",
        nproc_per_node=2,
        resume_arg="--resume",
        drain_reason="preempt.*",
        notice_signal="USR1",
        watch=False,
        in_place=False,
        file_access="group",
    )
    argv = launch_argv(full)
    wrapper = argv[argv.index("run") + 1 : argv.index("--")]
    flags = {a.split("=", 1)[0] for a in wrapper if a.startswith("--")}
    assert flags <= keys.FLAGS
    # ... and the wrapper parses that argv back to the spec's values.
    parsed = parse_args(argv[argv.index("run") :])
    assert parsed.watch.min_nodes == 2
    assert parsed.notice_signal is not None and parsed.notice_signal.name == "SIGUSR1"
    assert parsed.watching is False and parsed.watch.in_place is False


@pytest.mark.parametrize("flag", sorted(keys.FLAGS))
def test_no_wrapper_option_is_taken_as_the_resume_argument(flag: str) -> None:
    with pytest.raises(SpecError, match="resume_arg"):
        spec(resume_arg=flag)


@pytest.mark.parametrize(
    ("value", "why"),
    [("10", "not a signal name"), ("KILL", "cannot be caught"), ("USR2", "reserved"),
     ("NOPE", "not a signal name")],
)  # fmt: skip
def test_the_spec_and_the_wrapper_refuse_a_notice_signal_for_the_same_reason(
    value: str, why: str
) -> None:
    with pytest.raises(SpecError, match=f"notice_signal = '{value}': .*{why}"):
        spec(notice_signal=value)
    with pytest.raises(UsageError, match=f"--notice-signal '{value}' .*{why}"):
        parse_args(["--checkpoint-dir=/tmp/x", f"--notice-signal={value}", "--", "true"])


@pytest.mark.parametrize(
    ("flag", "key", "value"),
    [("--window", "preempt_window", "0"), ("--poll-interval", "poll_interval", "0.01"),
     ("--min-nodes", "nodes", "0"), ("--nproc-per-node", "nproc_per_node", "2000"),
     ("--safety-margin", "safety_margin", "nan")],
)  # fmt: skip
def test_the_wrapper_takes_the_spec_ranges(flag: str, key: str, value: str) -> None:
    low, high = keys.RANGES[key]
    with pytest.raises(UsageError, match=f"{flag} must be from {low:g} to {high:g}"):
        parse_args(["--checkpoint-dir=/tmp/x", f"{flag}={value}", "--", "true"])


def test_a_drain_reason_that_is_no_pattern_is_refused_by_both() -> None:
    with pytest.raises(SpecError, match="drain_reason = '\\(': is not a regular expression"):
        spec(drain_reason="(")
    with pytest.raises(UsageError, match="--drain-reason '\\(' is not a regular expression"):
        parse_args(["--checkpoint-dir=/tmp/x", "--drain-reason=(", "--", "true"])
