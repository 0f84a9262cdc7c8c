"""The provider's preemption of a Slurm node, replayed on the sandbox: drain at T+0 (no
signal), remove at T+window (slurmd and every job process on it killed at once, the node
marked DOWN, so ``--requeue`` jobs are requeued), and later a replacement under the same
name, idle and undrained. See docs/drill.md ("What it does").
"""

from __future__ import annotations

import logging
import shutil
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from slurmpre import defaults, procs
from slurmpre.cmd import run
from slurmpre.errors import SandboxError, UsageError
from slurmpre.sandbox import daemons
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.sandbox.daemons import HELPER_COMMAND

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class Event:
    at: float  # wall-clock seconds since the epoch
    offset: float  # seconds since T+0
    what: str

    def line(self) -> str:
        stamp = datetime.fromtimestamp(self.at, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
        return f"{stamp}Z T+{self.offset:.1f}s {self.what}"


@dataclass(frozen=True)
class PreemptPlan:
    node: str
    window: float = float(defaults.PREEMPT_WINDOW)
    return_after: float | None = None
    reason: str = "preempted"
    mark_down: bool = True
    # Remove the node as soon as no job runs on it (at the window's end at the latest):
    # a job that has left can observe no difference, and a rehearsal need not wait.
    once_empty: bool = False

    def __post_init__(self) -> None:
        if not self.window >= 0:
            raise UsageError(f"--window must be 0 seconds or more, got {self.window:g}")
        if self.return_after is not None and not self.return_after >= 0:
            raise UsageError(f"--return-after must be 0 seconds or more, got {self.return_after:g}")
        if not self.reason.strip() or "\n" in self.reason:
            raise UsageError(f"--reason must be one non-empty line, got {self.reason!r}")


def preempt(
    sandbox: Sandbox,
    plan: PreemptPlan,
    *,
    wall: Callable[[], float] = time.time,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    events: list[Event] | None = None,
) -> list[Event]:
    """Replay the timeline; each event is appended to ``events`` (if given) and logged as
    it happens."""
    cfg = sandbox.config()
    cfg.node(plan.node)  # unknown node -> UsageError naming it
    client = sandbox.client
    events = [] if events is None else events
    t0 = clock()

    def note(what: str) -> None:
        ev = Event(wall(), clock() - t0, what)
        events.append(ev)
        LOG.info(ev.line())

    def sleep_until(offset: float) -> None:
        while (left := t0 + offset - clock()) > 0:
            sleep(min(left, 1.0))

    node = client.nodes([plan.node])[0]
    if node.down:
        raise SandboxError(f"node {plan.node} is already down ({node.state}); nothing to preempt")
    jobs = _jobs_on(sandbox, plan.node)
    client.update_node(plan.node, state="DRAIN", reason=plan.reason)
    note(f"drain {plan.node} (reason: {plan.reason}); running jobs: {', '.join(jobs) or 'none'}")

    if plan.once_empty:
        while (left := t0 + plan.window - clock()) > 0 and _jobs_on(sandbox, plan.node):
            sleep(min(left, 1.0))
    else:
        sleep_until(plan.window)
    doomed = _jobs_on(sandbox, plan.node)
    killed = remove_node(sandbox, plan.node)
    gone = f"{plan.reason}: node removed"
    if plan.mark_down:
        client.update_node(plan.node, state="DOWN", reason=gone)
    removed = clock() - t0
    note(
        f"remove {plan.node}: slurmd and {killed} job process(es) killed"
        + ("; marked DOWN" if plan.mark_down else "; Slurm notices after SlurmdTimeout")
        + f"; jobs it ended: {', '.join(doomed) or 'none'}"
    )
    if plan.mark_down:  # not a timeline event: its readers take drain, removal, return
        keep_down(sandbox, plan.node, gone, clock=clock, sleep=sleep)

    if plan.return_after is None:
        return events
    sleep_until(removed + plan.return_after)
    restore_node(sandbox, plan.node)
    note(f"return {plan.node}: a replacement node is up and idle")
    return events


class InBackground(threading.Thread):
    """`preempt` in a thread of this process, keeping its timeline (`events`, as they
    happen); ``finish`` re-raises."""

    def __init__(self, sandbox: Sandbox, plan: PreemptPlan) -> None:
        super().__init__(daemon=True, name=f"preempt-{plan.node}")
        self.sandbox, self.plan = sandbox, plan
        self.events: list[Event] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            preempt(self.sandbox, self.plan, events=self.events)
        except BaseException as exc:  # noqa: BLE001 - re-raised by finish()
            self.error = exc

    def finish(self, timeout: float = 400) -> list[Event]:
        self.join(timeout)
        if self.is_alive():
            raise SandboxError(f"preempting {self.plan.node} did not finish within {timeout:g} s")
        if self.error is not None:
            raise self.error
        return self.events


def start_in_background(sandbox: Sandbox, plan: PreemptPlan) -> tuple[int, Path]:
    """Run the same timeline in a detached process; returns its pid and its log."""
    sandbox.config().node(plan.node)  # validate before going to the background
    log = sandbox.state_dir / "log" / f"preempt-{plan.node}-{int(time.time())}.log"
    argv = [sys.executable, *HELPER_COMMAND, plan.node]
    argv += ["--window", str(plan.window), "--reason", plan.reason]
    if plan.return_after is not None:
        argv += ["--return-after", str(plan.return_after)]
    if not plan.mark_down:
        argv.append("--no-mark-down")
    if plan.once_empty:
        argv.append("--once-empty")
    pid = daemons.spawn_detached(argv, log).pid
    sandbox.add_helper(pid)
    return pid, log


def _jobs_on(sandbox: Sandbox, node: str) -> list[str]:
    argv = ["squeue", "-h", "-w", node, "-o", "%i"]
    out = run(argv, check=False, timeout=15, env=sandbox.env).stdout
    return sorted({line.strip() for line in out.splitlines() if line.strip()})


KEEP_DOWN = 3.0  # seconds a removed node is watched for a late message bringing it back


def keep_down(
    sandbox: Sandbox,
    name: str,
    reason: str,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """A removed node stays down. A message its step sent just before the kill can reach
    slurmctld just after the node was marked DOWN, and ReturnToService=2 then puts it back
    in service with nothing behind it (it is marked down again once SlurmdTimeout passes,
    under whatever the scheduler sent there meanwhile). A machine the provider removed
    sends nothing more: for ``KEEP_DOWN`` seconds, mark it down again if it came back.
    True when it had to."""
    came_back = False
    until = clock() + KEEP_DOWN
    while clock() < until:
        if not sandbox.client.nodes([name])[0].down:
            sandbox.client.update_node(name, state="DOWN", reason=reason)
            came_back = True
        sleep(0.25)
    return came_back


def remove_node(sandbox: Sandbox, name: str) -> int:
    """Kill the node's slurmd and every job process it holds, at once, and empty its
    node-local folder: the machine is gone, and what was in its RAM or on its disk with it.

    Returns how many job processes died with it. Every slurmd running as the node dies,
    not only the one the state names: one it lost track of would bring the node back.
    """
    state = sandbox.current()
    cfg = state.config(sandbox.state_dir, sandbox.hostname)
    recorded = next((n.get("pid") for n in state.nodes if n["name"] == name), None)
    slurmds = daemons.running(name)
    if recorded and procs.is_process_of(recorded, "slurmd"):
        slurmds.add(recorded)
    steps = procs.holders_of_sockets_under(cfg.spool_dir(name))
    victims = steps | procs.descendants(steps) | slurmds | procs.descendants(slurmds)
    procs.kill_now(victims)
    sandbox.set_node_pid(name, None)
    local = cfg.local_dir(name)
    if local.is_dir() and not local.is_symlink():
        for entry in list(local.iterdir()):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
    return len(victims - slurmds)


def restore_node(sandbox: Sandbox, name: str, timeout: float = 60.0) -> None:
    """Start the node's slurmd again (unless one runs as it: a second would die on its
    port, and the state would name the dead one) and put it back in service."""
    cfg = sandbox.config()
    already = sorted(daemons.running(name))
    pid = already[0] if already else sandbox.start_slurmd(cfg, name)
    sandbox.set_node_pid(name, pid)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        node = sandbox.client.nodes([name])[0]
        if not node.down and node.state != "UNKNOWN":
            break
        time.sleep(0.2)
    if node.draining or node.down:  # a node never drained is back in service by itself
        sandbox.client.update_node(name, state="RESUME")
    while time.monotonic() < deadline:
        node = sandbox.client.nodes([name])[0]
        if node.usable:
            return
        time.sleep(0.2)
    raise SandboxError(f"node {name} did not come back within {timeout:g} s (state {node.state})")


def restore_all(sandbox: Sandbox) -> None:
    """Every node back in service: one with no slurmd running as it is started again,
    whatever its state says (a removed node that a late message put back in service
    reads IDLE until SlurmdTimeout passes, and takes the next job meanwhile); a drained
    one is resumed."""
    for node in sandbox.client.nodes():
        if node.down or not daemons.running(node.name):
            LOG.info(f"bringing {node.name} back")
            restore_node(sandbox, node.name)
        elif node.draining:
            sandbox.client.update_node(node.name, state="RESUME")
