"""What bench/big_state.py prints: each scenario measured from the training's log and the
ledger, the tables, the ratios and the verdict."""

from __future__ import annotations

import contextlib
import json
import statistics
from pathlib import Path
from typing import Any

from slurmpre.folder.records import (
    Checkpoint,
    End,
    Notice,
    PullAsked,
    PullDone,
    Pulled,
    Saved,
    Start,
)

from big_state_cut import passed as cut_passed
from big_state_cut import report as cut_report
from big_state_train import FINAL, LOG, expected_digest

TARGETS = (  # the issue's, for one node with the tier: what, key, at most
    ("drain seen → training again (s)", "seen_to_step_s", 15.0),
    ("longest periodic-save stall (s)", "stall_max", 3.0),
    ("peak memory beside the training's own (x state)", "beside_x", 2.5),
)


def read(path: Path) -> list[dict[str, Any]]:
    """The training's log; a line that does not parse is left out. The sandbox's shared
    filesystem shows a file being appended under load with its new tail still zeros
    (slowfs counts the bytes before it writes them), so a reader may meet half a line."""
    out = []
    with contextlib.suppress(FileNotFoundError):
        for line in path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
    return out


def measure(
    folder: Path, records: list[Any], drained: float, state_mb: int, steps: int
) -> dict[str, Any]:
    """From the training's log and the ledger: the saves, the hand-over, what was lost."""
    events = read(folder / LOG)
    stalls = [e["stall_s"] for e in events if e["event"] == "save" and e["why"] == "periodic"]
    began = next(e for e in events if e["event"] == "begin" and e["t"] > drained)
    first = next(e for e in events if e["event"] == "step" and e["t"] > began["t"])
    steps_done = [e["step"] for e in events if e["event"] == "step"]
    check = next((e for e in events if e["event"] == "resume-check" and e["t"] > began["t"]), {})
    stop = next((e for e in events if e["event"] == "save" and e["why"] == "stop"), None)
    final = folder / FINAL
    digest = json.loads(final.read_text())["sha256"] if final.is_file() else None
    pulled = [r for r in records if isinstance(r, Pulled)]
    done = next((r for r in records if isinstance(r, PullDone)), None)
    flushed = [r for r in records if isinstance(r, Checkpoint) and r.flush_seconds is not None]
    resumed = began["resumed_step"]
    # slurmpre's watcher saw the drain then; in the seeds' recipe no one does: the drain
    seen = next((r.seen_at for r in records if isinstance(r, Notice)), drained)
    cut = stop is None and any(e["event"] == "save-start" and e["why"] == "stop" for e in events)
    return {
        "stalls": stalls,
        "stall_max": max(stalls, default=0.0),
        "stop_save_s": None if stop is None else stop["stall_s"],
        "stop_cut": cut,
        "timeline": timeline(events, records, seen, began, first),
        "on_node_s": next(
            (r.seconds for r in records if isinstance(r, Saved) and r.after_notice), None
        ),
        "seen_to_step_s": first["t"] - seen,
        "drain_to_step_s": first["t"] - drained,
        "resumed_step": resumed,
        # the newest step saved on the nodes before the drain or the loss: a node lost
        # without notice loses at most the steps since it
        "newest_saved": max(
            (r.step for r in records if isinstance(r, Saved) and (r.time or 0) <= drained),
            default=None,
        ),
        "last_before": max(
            e["step"] for e in events if e["event"] == "step" and e["t"] < began["t"]
        ),
        "twice": len(steps_done) - len(set(steps_done)),  # trained twice: the steps lost
        "exact": check.get("exact"),
        "digest_ok": digest is not None and digest == expected(state_mb, steps),
        "pull_mb": sum(r.bytes for r in pulled) / 1e6 if pulled else None,
        "pull_s": max((r.seconds for r in pulled), default=None),
        "pull_done": None if done is None else "ok" if done.ok else f"failed: {done.why}",
        "flush_s": [r.flush_seconds for r in flushed],
        "resumed_flush_s": next((r.flush_seconds for r in flushed if r.step == resumed), None),
    }


def timeline(events: list[dict[str, Any]], records: list[Any], seen: float, began: dict[str, Any],
             first: dict[str, Any]) -> str:  # fmt: skip
    """Where a hand-over's time went, in seconds from the drain being seen."""
    marks = []
    for e in events:
        if e["event"] in ("save-start", "save") and e["why"] == "stop":
            marks.append((e["t"], "save begins" if e["event"] == "save-start" else "saved"))
    kinds = {End: "ended", PullAsked: "pull asked", PullDone: "pulled", Start: "starts"}
    for r in records:
        if type(r) in kinds and r.time is not None and seen < r.time < first["t"]:
            marks.append((r.time, f"job {r.job} {kinds[type(r)]}"))
    marks += [(began["t"], "state loaded"), (first["t"], "first step")]
    return ", ".join(f"{what} +{at - seen:.1f}" for at, what in sorted(marks))


_digests: dict[tuple[int, int], str] = {}


def expected(state_mb: int, steps: int) -> str:
    """The sha256 of an uninterrupted run's final state (computed once)."""
    if (state_mb, steps) not in _digests:
        _digests[state_mb, steps] = expected_digest(state_mb, steps)
    return _digests[state_mb, steps]


def fmt(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def tables(results: dict[Any, dict[str, Any]], state_mb: int) -> None:
    print(f"  {'scenario':<28} {'jobs':<9} {'stall max/median s':>18} {'seen→step s':>11} "
          f"{'drain→step s':>12} {'lost':>4} {'exact':>5} {'digest':>6}")  # fmt: skip
    for sc, r in results.items():
        if "failed" in r:
            print(f"  {sc.name:<28} {'→'.join(r['jobs']):<9} FAILED: {r['failed']}")
            for line in r["errors"]:
                print(f"  {'':<28} | {line}")
            continue
        median = statistics.median(r["stalls"]) if r["stalls"] else None
        print(
            f"  {sc.name:<28} {'→'.join(r['jobs']):<9} "
            f"{fmt(r['stall_max']) + ' / ' + fmt(median):>18} {r['seen_to_step_s']:>11.1f} "
            f"{r['drain_to_step_s']:>12.1f} {r['twice']:>4} {r['exact']!s:>5} "
            f"{'equal' if r['digest_ok'] else 'WRONG':>6}"
        )
    loads = ", ".join(f"{sc.name} {r['load_max']:.1f}" for sc, r in results.items())
    print(f"  the 1-minute load average, the highest in each (2 cores): {loads}")
    print("\nthe after-notice save and the hand-over (the training's log and the ledger):")
    for sc, r in results.items():
        if sc.how == "seeds" or "failed" in r:
            continue
        flushes = ", ".join(fmt(f) for f in r["flush_s"]) or "-"
        stopped = "the node's removal cut it" if r["stop_cut"] else (
            f"it stopped the training {fmt(r['stop_save_s'])} s (on the node "
            f"{fmt(r['on_node_s'], '.2f')} s)"
        )  # fmt: skip
        print(
            f"  {sc.name:<28} {stopped}; resumed at step {r['resumed_step']} (last trained "
            f"{r['last_before']}); pulled {fmt(r['pull_mb'], '.0f')} MB in "
            f"{fmt(r['pull_s'], '.2f')} s ({r['pull_done'] or 'no pull'}); flushes {flushes} s "
            f"(the resumed step's {fmt(r['resumed_flush_s'])} s)"
        )
        print(f"  {'':<28} from the drain seen, s: {r['timeline']}")
        if sc.victim == "pull cut":
            for line in cut_report(r):
                print(f"  {'':<28} {line}")
    print(f"\npeak memory per node: RSS of the job's processes + its node-local folder (state "
          f"{state_mb} MB; sampled every 0.5 s):")  # fmt: skip
    for sc, r in results.items():
        for node, m in r.get("memory", {}).items():
            print(
                f"  {sc.name:<28} {node:<23} {m['peak_mb']:>6.0f} MB = "
                f"{m['peak_mb'] / state_mb:.2f}x state (RSS {m['rss_mb']:.0f} + local "
                f"{m['local_mb']:.0f}); training's own RSS {m['own_mb']:.0f} MB, beside it "
                f"{m['beside_x']:.2f}x state"
            )
        if "leftover_mb" in r:
            print(f"  {sc.name:<28} left in the nodes' local folders at its end: "
                  f"{r['leftover_mb']:.0f} MB")  # fmt: skip


def verdict(results: dict[Any, dict[str, Any]], save_s: float, window: float) -> bool:
    """The ratios and the targets; whether every slurmpre run kept its promise."""
    by = {sc.name: r for sc, r in results.items() if "failed" not in r}
    tier = by.get("1 node, local tier")
    print("\nratios, in this run (1 node; drain → first step of the next attempt):")
    for base, label in (("1 node, local tier", "local tier"),
                        ("1 node + spare, local tier", "spare and tier")):  # fmt: skip
        for name in ("1 node, no tier", "1 node, seeds' recipe"):
            if (ours := by.get(base)) is not None and (other := by.get(name)) is not None:
                hand = other["drain_to_step_s"] / ours["drain_to_step_s"]
                stall = other["stall_max"] / max(ours["stall_max"], 1e-3)
                print(f"  {name} / {label}: hand-over {hand:.1f}x slower; longest "
                      f"periodic-save stall {stall:.1f}x longer")  # fmt: skip
    ok = True
    print("\nslurmpre's promise, in this run:")
    for sc, r in results.items():
        if sc.how == "seeds":
            continue
        if "failed" in r:
            ok = False
            print(f"  {sc.name:<28} FAILED ({r['failed']})")
            continue
        # Without the tier an after-notice save longer than the window cannot be made: that
        # loss is what the tier is for, not a broken promise.
        excused = sc.how == "no tier" and save_s > window - 10
        if sc.victim == "pull cut":  # the pull cut: the folder's newest, steps since lost
            cut_ok = cut_passed(r)
            good = bool(cut_ok) and r["exact"] is True and r["digest_ok"]
            ok = ok and good and not r["left"]
            what = {None: "INCONCLUSIVE (the pull was not cut midway)", True: "pull cut midway, "
                    "resumed from the folder's newest durable checkpoint, nothing partial, one "
                    "line said so", False: "its checks FAILED"}[cut_ok]  # fmt: skip
            print(f"  {sc.name:<28} {what}; {r['twice']} steps trained twice (since step "
                  f"{r['resumed_step']}); resumed state {'exact' if r['exact'] else 'NOT EXACT'}; "
                  f"final state {'equal to' if r['digest_ok'] else 'DIFFERENT from'} an "
                  f"uninterrupted run's; left queued: {', '.join(r['left']) or 'nothing'}")  # fmt: skip
            continue
        # A node lost without notice: what it trained since the newest save on the nodes.
        lost = sc.victim == "lost" and r["resumed_step"] == r["newest_saved"]
        good = (r["twice"] == 0 or excused or lost) and r["exact"] is not False and r["digest_ok"]
        ok = ok and good and not r["left"]
        why = " (its save cannot fit in the window)" if excused and r["twice"] else ""
        if sc.victim == "lost":
            why = (f" (trained since step {r['newest_saved']}, the newest saved on the nodes; "
                   f"resumed at step {r['resumed_step']})")  # fmt: skip
        print(
            f"  {sc.name:<28} {r['twice']} steps lost{why}; resumed state "
            f"{'exact' if r['exact'] else 'NOT EXACT'}; final state "
            f"{'equal to' if r['digest_ok'] else 'DIFFERENT from'} an uninterrupted run's; "
            f"left queued: {', '.join(r['left']) or 'nothing'}"
        )
    if tier is not None:
        beside = max((m["beside_x"] for m in tier["memory"].values()), default=0.0)
        for what, key, target in TARGETS:
            value = beside if key == "beside_x" else tier[key]
            print(f"  1 node, local tier: {what} {value:.2f}, target <= {target:g}: "
                  f"{'met' if value <= target else 'MISSED'}")  # fmt: skip
    return ok
