"""The sandbox's removal of a node, without a sandbox: a removed node stays down."""

from __future__ import annotations

import pytest


def test_a_removed_node_a_late_message_brought_back_is_marked_down_again() -> None:
    """slurmctld took a message the removed node's step sent before the kill as the node
    answering, and put it back in service (ReturnToService=2): it goes down again."""
    from types import SimpleNamespace

    from slurmpre.sandbox.preempt import keep_down

    now = [0.0]
    downs: list[str] = []
    answers = iter([False, True, True] + [True] * 100)  # back once, then down

    class Client:
        def nodes(self, names: list[str]) -> list[SimpleNamespace]:
            return [SimpleNamespace(down=next(answers))]

        def update_node(self, name: str, *, state: str, reason: str) -> None:
            downs.append(f"{name} {state} {reason}")

    box = SimpleNamespace(client=Client())

    def sleep(seconds: float) -> None:
        now[0] += seconds

    assert keep_down(box, "n1", "gone", clock=lambda: now[0], sleep=sleep)  # type: ignore[arg-type]
    assert downs == ["n1 DOWN gone"]
    answers = iter([True] * 100)
    downs.clear()
    assert not keep_down(box, "n1", "gone", clock=lambda: now[0], sleep=sleep)  # type: ignore[arg-type]
    assert downs == []


def test_putting_every_node_back_starts_a_slurmd_where_none_runs_whatever_the_state(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A removed node that a late message put back in service reads IDLE with no slurmd
    behind it (until SlurmdTimeout): the clean-up starts its slurmd all the same; a
    drained node with its slurmd is resumed; a healthy one is left alone."""
    from types import SimpleNamespace

    from slurmpre.sandbox import preempt

    nodes = [
        SimpleNamespace(name="back-by-mistake", down=False, draining=False),
        SimpleNamespace(name="drained", down=False, draining=True),
        SimpleNamespace(name="removed", down=True, draining=False),
        SimpleNamespace(name="healthy", down=False, draining=False),
    ]
    slurmds = {"drained": {11}, "healthy": {12}}
    restored: list[str] = []
    resumed: list[str] = []

    class Client:
        def nodes(self) -> list[SimpleNamespace]:
            return nodes

        def update_node(self, name: str, *, state: str) -> None:
            assert state == "RESUME"
            resumed.append(name)

    monkeypatch.setattr(preempt.daemons, "running", lambda name: slurmds.get(name, set()))
    monkeypatch.setattr(preempt, "restore_node", lambda box, name: restored.append(name))
    preempt.restore_all(SimpleNamespace(client=Client()))  # type: ignore[arg-type]
    assert restored == ["back-by-mistake", "removed"]
    assert resumed == ["drained"]
