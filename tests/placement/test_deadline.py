"""A deadline as the spec gives it: an ISO 8601 moment or a duration from the first submit."""

from __future__ import annotations

import datetime as dt

import pytest
from slurmpre.errors import UsageError
from slurmpre.placement import deadline

FIRST = 1_800_000_000.0


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90m", 5400), ("8h", 28800), ("2d", 172800), ("1d12h", 129600), ("45s", 45),
     ("1.5h", 5400), (" 2H ", 7200), ("1w", 604800)],
)  # fmt: skip
def test_a_duration_counts_from_the_first_submission(text: str, seconds: float) -> None:
    assert deadline.parse(text, first_submit=FIRST) == FIRST + seconds


def test_a_moment_without_an_offset_is_the_login_nodes_local_time() -> None:
    local = dt.datetime(2027, 3, 10, 18, 0).astimezone()
    assert deadline.parse("2027-03-10T18:00", first_submit=FIRST) == local.timestamp()


@pytest.mark.parametrize(
    ("text", "utc"),
    [("2027-03-10T18:00+01:00", "2027-03-10T17:00"), ("2027-03-10T18:00Z", "2027-03-10T18:00")],
)
def test_a_moment_with_an_offset_means_that_offset(text: str, utc: str) -> None:
    want = dt.datetime.fromisoformat(utc).replace(tzinfo=dt.timezone.utc).timestamp()
    assert deadline.parse(text, first_submit=None) == want


@pytest.mark.parametrize("text", ["", "soon", "8x", "h", "2026-13-40T18:00", "0h", "400d", "-5m"])
def test_a_deadline_that_means_nothing_is_one_line_naming_it(text: str) -> None:
    with pytest.raises(UsageError) as err:
        deadline.parse(text, first_submit=FIRST)
    assert repr(text) in str(err.value) and "\n" not in str(err.value)


def test_at_submit_a_past_moment_is_refused_and_a_duration_never_is() -> None:
    now = dt.datetime(2027, 3, 10, 12, 0).astimezone().timestamp()
    with pytest.raises(UsageError, match="already past"):
        deadline.check("2027-03-10T11:00", now=now)
    deadline.check("2027-03-10T13:00", now=now)
    deadline.check("1h", now=now)
