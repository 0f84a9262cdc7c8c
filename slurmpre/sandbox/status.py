"""What the sandbox runs, where: a report (plain data) and its text form."""

from __future__ import annotations

from typing import Any

from slurmpre import environment, procs
from slurmpre.errors import CommandError
from slurmpre.sandbox import shared_fs
from slurmpre.sandbox.asked import shared_words
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.sandbox.daemons import helpers_running
from slurmpre.slurm.parse import format_version


def describe(sandbox: Sandbox) -> dict[str, Any]:
    state = sandbox.load()
    if state is None:
        return {"up": False, "state_dir": str(sandbox.state_dir)}
    cfg = state.config(sandbox.state_dir, sandbox.hostname)
    slurm: dict[str, Any] = {}
    try:
        slurm = {n.name: n for n in sandbox.client.nodes()}
    except CommandError as exc:
        error: str | None = str(exc).splitlines()[0]
    else:
        error = None

    def proc(pid: int | None, exe: str) -> dict[str, Any]:
        return {"pid": pid, "running": bool(pid) and procs.is_process_of(pid or 0, exe)}

    nodes = []
    for n in state.nodes:
        info = slurm.get(n["name"])
        nodes.append(
            {
                "name": n["name"],
                "preemptible": n["preemptible"],
                "port": n["port"],
                "slurmd": proc(n.get("pid"), "slurmd"),
                "state": None if info is None else "+".join([info.state, *sorted(info.flags)]),
                "reason": None if info is None else info.reason,
            }
        )
    return {
        "up": sandbox.daemons_alive(state),
        "state_dir": str(sandbox.state_dir),
        "slurm_version": format_version(state.version),
        "timings": state.timings,
        "root": state.root,  # a Debian root the daemons run in (None: the host's Slurm)
        "commands": None if sandbox.root is None else str(sandbox.root.shims),
        "proctrack": f"proctrack/{cfg.tracking.proctrack}",
        "task_plugin": cfg.tracking.task_plugin,
        "munged": proc(state.munged, "munged") if state.munged else {"pid": None, "ours": False},
        "slurmctld": proc(state.slurmctld, "slurmctld"),
        "helpers": sorted(helpers_running(state)),
        # `up --shared-dir`: dir, mbps, backing, and whether it is served and mounted
        "shared": None
        if state.shared is None
        else {**state.shared, "mounted": shared_fs.alive(state.shared, sandbox.instance)},
        # each node's own folder is <this>/<node> (None: a sandbox up from before they were)
        "local_dirs": str(cfg.local_root) if cfg.local_root.is_dir() else None,
        "nodes": nodes,
        "slurmctld_error": error,
    }


def format_report(report: dict[str, Any]) -> str:
    if "nodes" not in report:
        return f"sandbox: not up (state in {report['state_dir']})"

    def pid(p: dict[str, Any]) -> str:
        if p.get("pid") is None:
            return "-"
        return f"pid {p['pid']} " + ("running" if p["running"] else "GONE")

    lines = [
        f"sandbox: {'up' if report['up'] else 'NOT HEALTHY'}; Slurm {report['slurm_version']}, "
        f"{report['timings']} timings; state in {report['state_dir']}",
        f"  tracking   {report['proctrack']}, TaskPlugin={report['task_plugin']}",
    ]
    if report.get("root"):
        lines.append(
            f"  root       {report['root']} "
            f"(its Slurm commands: export PATH={report['commands']}:$PATH)"
        )
    lines += [
        "  munged     "
        + (pid(report["munged"]) if report["munged"]["pid"] else "not ours (was running)"),
        f"  slurmctld  {pid(report['slurmctld'])}",
    ]
    if report.get("shared"):
        shared = report["shared"]
        health = "mounted" if shared["mounted"] else "NOT SERVED OR NOT MOUNTED"
        lines.append(
            f"  shared     {shared_words(shared).removeprefix('shared ')} (FUSE, pid "
            f"{shared['pid']} {health}; its files in {shared['backing']})"
        )
    if report.get("local_dirs"):
        lines.append(
            f"  local      {report['local_dirs']}/<node>, in jobs ${environment.NODE_LOCAL_DIR}"
        )
    if report["helpers"]:
        lines.append(f"  helpers    {', '.join(map(str, report['helpers']))} (background preempt)")
    if report["slurmctld_error"]:
        lines.append(f"  slurmctld does not answer: {report['slurmctld_error']}")
    width = max(len(n["name"]) for n in report["nodes"])
    lines.append(f"  {'NODE':<{width}}  {'FEATURE':<11}  {'SLURMD':<18}  STATE  REASON")
    for n in report["nodes"]:
        feature = "preemptible" if n["preemptible"] else "standard"
        lines.append(
            f"  {n['name']:<{width}}  {feature:<11}  {pid(n['slurmd']):<18}  "
            f"{n['state'] or '?'}  {n['reason'] or ''}".rstrip()
        )
    return "\n".join(lines)
