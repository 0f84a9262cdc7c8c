import json
import re
from dataclasses import asdict
from pathlib import Path

import pytest
from slurmpre.errors import CheckpointError, JobEnvironmentError
from slurmpre.folder.ledger import Choice, Ledger
from slurmpre.folder.records import AttemptId

from tests.records import dicts, record


def choice(**kw: object) -> Choice:
    base: dict[str, object] = {
        "job": "7",
        "attempt": 1,
        "resume_from": "/c/step-00000010",
        "step": 10,
        "nodes": ("n1", "n2"),
        "world_size": 2,
        "previous_world_size": 4,
        "rdzv_endpoint": "127.0.0.1:20007",
        "published_at": 1.0,
    }
    return Choice(**{**base, **kw})  # type: ignore[arg-type]


def test_append_only_and_readable(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    ledger.ensure()
    ledger.append(record({"event": "start", "job": "7", "attempt": 0, "world_size": 4}))
    ledger.append(record({"event": "end", "job": "7", "attempt": 0, "exit_code": 0}))
    before = ledger.path.read_text()
    ledger.append(record({"event": "start", "job": "7", "attempt": 1, "world_size": 2}))
    assert ledger.path.read_text().startswith(before)
    assert [r["event"] for r in dicts(ledger)] == ["start", "end", "start"]
    prev = ledger.previous_start("7", AttemptId(1))
    assert prev is not None and prev.world_size == 4


def test_a_line_cut_short_by_a_kill_is_skipped(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    ledger.ensure()
    ledger.append(record({"event": "start", "job": "7", "attempt": 0}))
    with ledger.path.open("a") as fh:
        fh.write('{"event": "end", "jo')
    assert len(ledger.records()) == 1


def test_published_choice_is_read_back(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    ledger.ensure()
    mine = choice(resume_from=str(tmp_path / "step-00000010"))
    ledger.publish(mine)
    assert ledger.wait_choice("7", 1, timeout=1) == mine
    ledger.publish(choice(attempt=2, resume_from=None, step=None))
    assert ledger.wait_choice("7", 2, timeout=1).resume_from is None


def _forged(ledger: Ledger, **changes: object) -> None:
    record = {**asdict(choice(resume_from=str(ledger.folder / "step-00000010"))), **changes}
    (ledger.dir / "choice-7-1.json").write_text(json.dumps(record))


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"resume_from": "/etc"}, "resume_from = '/etc' is not inside"),
        ({"resume_from": "{folder}/../other/step-00000010"}, "is not inside"),
        ({"resume_from": "{folder}"}, "is not inside"),
        ({"resume_from": "{folder}/escape/step-00000010"}, "is not inside"),  # a symlink out
        ({"resume_from": 5}, "resume_from = 5 has the wrong type"),
        ({"step": "10"}, "step = '10' has the wrong type"),
        ({"step": True}, "step = True has the wrong type"),
        ({"step": -1}, "must not be negative"),
        ({"world_size": 0}, "must not be negative"),
        ({"nodes": []}, "must be node names"),
        ({"nodes": ["n1", 3]}, "must be node names"),
        ({"job": "8"}, "it is for job '8' attempt 1"),
        ({"extra": 1}, "exactly the keys"),
    ],
)
def test_a_choice_that_cannot_be_right_is_refused(
    tmp_path: Path, changes: dict[str, object], why: str
) -> None:
    """Other nodes resume from what the choice file says: a choice naming a path outside
    the checkpoint folder, or of the wrong shape, is refused before anything loads it."""
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (tmp_path / "other").mkdir()
    (folder / "escape").symlink_to(tmp_path / "other")
    ledger = Ledger(folder)
    ledger.ensure()
    fixed = {
        k: v.replace("{folder}", str(folder)) if isinstance(v, str) else v
        for k, v in changes.items()
    }
    _forged(ledger, **fixed)
    with pytest.raises(CheckpointError, match=re.escape(why)):
        ledger.wait_choice("7", 1, timeout=1)


@pytest.mark.parametrize("text", ["", "[1]", "{not json", "\xff"])
def test_a_garbled_choice_is_refused_in_one_line(tmp_path: Path, text: str) -> None:
    ledger = Ledger(tmp_path)
    ledger.ensure()
    (ledger.dir / "choice-7-1.json").write_bytes(text.encode("latin-1"))
    with pytest.raises(CheckpointError, match=r"choice-7-1\.json") as caught:
        ledger.wait_choice("7", 1, timeout=1)
    assert "\n" not in str(caught.value)


def test_waiting_for_a_choice_times_out_clearly(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    ledger.ensure()
    now = [0.0]
    with pytest.raises(JobEnvironmentError, match=r"did not publish .* within 30 s"):
        ledger.wait_choice(
            "7", 2, 30, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s)
        )
    assert now[0] >= 30


def test_a_torn_last_line_never_swallows_the_next_record(tmp_path: Path) -> None:
    """A kill mid-write leaves a line without its newline; the next append must not be
    glued onto it (it would be lost with it, and previous_start would go back too far)."""
    ledger = Ledger(tmp_path)
    ledger.ensure()
    ledger.append(record({"event": "start", "job": "7", "attempt": 0, "world_size": 4}))
    with ledger.path.open("a") as fh:
        fh.write('{"event": "end", "jo')
    ledger.append(record({"event": "start", "job": "7", "attempt": 1, "world_size": 2}))
    assert [r["attempt"] for r in dicts(ledger)] == [0, 1]
    previous = ledger.previous_start("7", AttemptId(2))
    assert previous is not None and previous.world_size == 2


def test_a_last_line_still_being_written_is_read_once_whole_and_never_warned_of(
    tmp_path: Path,
) -> None:
    """A reader on a slow shared volume saw a long notice record come in pieces and said
    "skipping line 7 ...: not a JSON object" of a line that was whole a moment later."""
    warned: list[str] = []
    ledger = Ledger(tmp_path, warn=warned.append)
    ledger.ensure()
    ledger.append(record({"event": "start", "job": "7", "attempt": 0}))
    whole = record({"event": "start", "job": "7", "attempt": 1, "time": 5.0})
    line = json.dumps(whole.to_json()) + "\n"
    with ledger.path.open("a") as fh:
        fh.write(line[:12])
    assert [r["attempt"] for r in dicts(ledger)] == [0] and warned == []
    with ledger.path.open("a") as fh:
        fh.write(line[12:])
    assert [r["attempt"] for r in dicts(ledger)] == [0, 1] and warned == []


def test_binary_and_non_object_lines_are_skipped_with_a_warning(tmp_path: Path) -> None:
    warned: list[str] = []
    ledger = Ledger(tmp_path, warn=warned.append)
    ledger.ensure()
    ledger.append(record({"event": "start", "job": "7", "attempt": 0}))
    with ledger.path.open("ab") as fh:
        fh.write(b"\xff\xfe\x00binary\n")
        fh.write(b'["a", "json", "array"]\n')
        fh.write(b"42\n")
        fh.write(b'{"event": "torn", "jo')
    for attempt in (1, 2):
        ledger.append(record({"event": "start", "job": "7", "attempt": attempt}))
    assert [r["attempt"] for r in dicts(ledger)] == [0, 1, 2]
    assert [w.split(" of ")[0] for w in warned] == [
        f"slurmpre: skipping line {n}" for n in (2, 3, 4, 5)
    ]
    ledger.records()
    assert len(warned) == 4  # each bad line is said once


def test_an_unwritable_ledger_is_a_slurmpre_error_naming_the_file(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    ledger.ensure()
    ledger.path.mkdir()  # a real OSError, even as root
    with pytest.raises(CheckpointError, match=r"cannot write the ledger '.*attempts.jsonl'"):
        ledger.append(record({"event": "start"}))


def test_one_clock_for_every_record(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path, clock=lambda: 123.5)
    ledger.ensure()
    ledger.append(record({"event": "start"}))
    assert dicts(ledger)[0]["time"] == 123.5


def test_the_step_before_an_in_place_restart_is_the_previous_start(tmp_path: Path) -> None:
    """Attempt 0 trained on 2 nodes, then went on in place on 1 (0.1): 0.1's previous start
    is 0's, of the same restart count, not the job's run before that."""
    ledger = Ledger(tmp_path)
    ledger.ensure()
    for attempt, in_place, world in ((0, 0, 4), (1, 0, 2), (1, 1, 1)):
        ledger.append(
            record(
                {
                    "event": "start",
                    "job": "7",
                    "attempt": attempt,
                    **({"in_place": in_place} if in_place else {}),
                    "world_size": world,
                }
            )
        )
    prev = ledger.previous_start("7", AttemptId(1, 1))
    assert prev is not None and prev.world_size == 2


def test_lines_read_before_are_not_parsed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job's start reads the ledger several times: each whole line is parsed once."""
    from slurmpre.folder import ledger as ledger_module

    start, end, again = (
        record({"event": "start", "job": "7", "attempt": 0}),
        record({"event": "end", "job": "7", "attempt": 0, "exit_code": 0}),
        record({"event": "start", "job": "7", "attempt": 1}),
    )
    parsed: list[str] = []
    real = ledger_module.Record.from_json
    monkeypatch.setattr(
        ledger_module.Record, "from_json", lambda d: parsed.append(d["event"]) or real(d)
    )
    ledger = Ledger(tmp_path)
    ledger.ensure()
    ledger.append(start)
    ledger.append(end)
    assert len(ledger.records()) == 2 and len(ledger.records()) == 2
    ledger.append(again)
    assert [r.EVENT for r in ledger.records()] == ["start", "end", "start"]
    assert parsed == ["start", "end", "start"]


def test_a_line_still_being_written_is_read_again_once_whole(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    ledger.ensure()
    ledger.append(record({"event": "start", "job": "7", "attempt": 0}))
    end = record({"event": "end", "job": "7", "attempt": 0, "exit_code": 0}).stamped(1.0)
    line = json.dumps(end.to_json())
    with ledger.path.open("a") as fh:
        fh.write(line[:10])
    assert [r.EVENT for r in ledger.records()] == ["start"]
    with ledger.path.open("a") as fh:
        fh.write(line[10:] + "\n")
    assert [r.EVENT for r in ledger.records()] == ["start", "end"]


def test_a_ledger_replaced_under_the_reader_is_read_anew(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    ledger.ensure()
    ledger.append(record({"event": "start", "job": "7", "attempt": 0}))
    assert [r.job for r in ledger.records()] == ["7"]
    other = tmp_path / "other.jsonl"
    other.write_text(
        json.dumps(record({"event": "start", "job": "8", "attempt": 0}).stamped(1.0).to_json())
        + "\n"
    )
    other.chmod(ledger.path.stat().st_mode & 0o777)
    other.replace(ledger.path)
    assert [r.job for r in ledger.records()] == ["8"]
