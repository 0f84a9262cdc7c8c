"""The ledger's typed records: the JSON on disk does not change, and records of the wrong
shape are refused by name."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from slurmpre.folder import records
from slurmpre.folder.ledger import Ledger
from slurmpre.folder.record_shape import ShapeError
from slurmpre.folder.records import AttemptId, Record

from tests.conftest import DATA

LEDGERS = sorted((DATA / "ledgers").glob("*.jsonl"))


@pytest.mark.parametrize("path", LEDGERS, ids=lambda p: p.name)
def test_every_line_the_sandbox_wrote_reads_and_writes_back_byte_for_byte(path: Path) -> None:
    lines = path.read_text().splitlines()
    assert lines
    kinds = set()
    for line in lines:
        record = Record.from_json(json.loads(line))
        assert not isinstance(record, records.Other), line  # every event there is known
        assert not record.extra, (line, record.extra)  # ... and every key
        kinds.add(type(record))
        assert json.dumps(record.to_json(), sort_keys=True) == line
    assert records.Start in kinds and records.Notice in kinds


def test_every_event_keeps_the_name_it_has_on_disk() -> None:
    """The names are derived from the class names: a renamed class must not rename an event."""
    assert list(records.EVENTS) == [
        "submitted",
        "start",
        "notice",
        "checkpoint",
        "saved",
        "serving",
        "pull_asked",
        "pulled",
        "replicated",
        "adopted",
        "pull_done",
        "committed",
        "requeued",
        "requeue_skipped",
        "in_place_requested",
        "in_place",
        "spare_released",
        "successor",
        "waiting",
        "stopping",
        "in_place_failed",
        "gave_up",
        "placed",
        "claimed",
        "end",
    ]


def test_records_the_writers_make_are_what_the_ledger_held_before_typed_records() -> None:
    """A ledger today's writers wrote (before these types): each record, made afresh as a
    writer makes it (not as read), is the same line."""
    path = DATA / "ledgers" / "in-place-then-requeue.jsonl"
    for line in path.read_text().splitlines():
        made = dataclasses.replace(Record.from_json(json.loads(line)), read_keys=None)
        assert json.dumps(made.to_json(), sort_keys=True) == line


def test_the_ledger_appends_and_reads_typed_records(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path, clock=lambda: 5.0)
    start = records.Start(job="7", attempt=1, in_place=2, nodes=("n1",), num_nodes=1,
                          world_size=8, resume_from="/c/step-00000010", step=10)  # fmt: skip
    ledger.append(start)
    ledger.append(records.End(job="7", attempt=1, exit_code=0, seconds=1.5))
    back = ledger.records()
    assert back == [start.stamped(5.0), records.End(job="7", attempt=1, exit_code=0,
                                                      seconds=1.5, time=5.0)]  # fmt: skip
    first, second = ledger.path.read_text().splitlines()
    assert json.loads(first)["in_place"] == 2
    assert "in_place" not in json.loads(second)  # an attempt that never restarted in place
    assert isinstance(back[0], records.Start) and back[0].attempt_id == AttemptId(1, 2)
    assert back[0].attempt_id.key == "1.2" and AttemptId(3).key == "3"


def test_a_repeated_notice_writes_no_plan_and_the_first_writes_it_whole() -> None:
    base = {"job": "7", "attempt": 0, "kind": "drain", "node": "n1", "reason": None, "time": 1.0}
    again = records.Notice(**base, seen_at=2.0, first=False)
    assert set(again.to_json()) == {"event", "job", "attempt", "kind", "node", "reason",
                                    "seen_at", "first", "time"}  # fmt: skip
    first = records.Notice(**base, seen_at=2.0, first=True)
    assert first.to_json()["step_at_notice"] is None and "restart" in first.to_json()


def test_a_later_versions_keys_and_events_are_kept_as_read() -> None:
    line = {"event": "start", "job": "7", "attempt": 0, "nodes": [], "num_nodes": 0, "step": None,
            "world_size": 1, "resume_from": None, "time": 1.0, "gpu": "h100"}  # fmt: skip
    assert Record.from_json(line).to_json() == line
    other = {"event": "handed_over", "job": "7", "to": "8", "time": 2.0}
    read = Record.from_json(other)
    assert isinstance(read, records.Other) and read.to_json() == other


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ({"event": "start", "job": [1], "attempt": 0, "nodes": []}, "job = [1] has the wrong type"),
        ({"event": "end", "job": "1", "attempt": 0, "exit_code": 0, "seconds": "soon"}, "seconds"),
        ({"event": "start", "job": "1", "attempt": 0, "nodes": 5}, "nodes = 5"),
        ({"event": "start", "job": "1", "attempt": True, "nodes": []}, "attempt = true"),
        (
            {
                "event": "checkpoint",
                "job": "1",
                "attempt": 0,
                "step": 1,
                "path": "/c",
                "after_notice": False,
                "seconds": float("inf"),
            },
            "seconds = inf",
        ),
        ({"event": "requeued", "job": "1", "attempt": 0, "why": None}, "no 'requeued_at'"),
        ({"event": 5, "job": "1"}, "event = 5"),
        ({"event": "submitted", "job": "1", "name": "n"}, "no 'time'"),
        ([1, 2], "not a JSON object"),
    ],
)
def test_a_record_of_the_wrong_shape_is_refused_naming_the_key(line: object, why: str) -> None:
    data = {"time": 1.0, **line} if isinstance(line, dict) and "event" in line else line
    if isinstance(line, dict) and line.get("event") == "submitted":
        data = line
    with pytest.raises(ShapeError, match=why.replace("[", r"\[").replace("]", r"\]")):
        Record.from_json(data)  # type: ignore[arg-type]


def test_a_record_is_frozen_and_made_only_from_its_own_keys() -> None:
    """Record types share one ``__init__`` (`slurmpre.folder.record.record_type`): it must
    keep what a frozen, keyword-only dataclass promises."""
    end = records.End(job="7", attempt=1, exit_code=0, seconds=2.5)
    assert (end.in_place, end.time, dict(end.extra)) == (0, None, {})  # the defaults
    with pytest.raises(dataclasses.FrozenInstanceError):
        end.job = "8"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del end.job  # type: ignore[misc]
    with pytest.raises(TypeError, match="End needs 'seconds'"):
        records.End(job="7", attempt=1, exit_code=0)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="End has no field 'sconds'"):
        records.End(job="7", attempt=1, exit_code=0, seconds=1, sconds=2)  # type: ignore[call-arg]
    stamped = end.stamped(5.0)
    assert (stamped.time, end.time) == (5.0, None)
    assert stamped == dataclasses.replace(end, time=5.0) and stamped != end
    assert records.End(job="7", attempt=1, exit_code=0, seconds=2.5).extra is not end.extra
