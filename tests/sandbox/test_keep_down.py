"""The sandbox's removal of a node, without a sandbox: a removed node stays down."""

from __future__ import annotations


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
