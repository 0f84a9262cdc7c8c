"""``slurmpre sandbox ...``: a real Slurm cluster on this machine."""

from __future__ import annotations

import click

from slurmpre import defaults
from slurmpre.cli.common import echoed, json_document, sandbox_here

SANDBOX = "slurmpre.sandbox"  # the package whose lines these commands show


@click.group()
def sandbox() -> None:
    """A real Slurm cluster on this machine, for tests and rehearsals."""


@sandbox.command("up")
@click.option("--nodes", default=3, show_default=True, help="Number of nodes.")
@click.option(
    "--preemptible", default=2, show_default=True, help="How many of them carry `preemptible`."
)
@click.option(
    "--stock-timings",
    is_flag=True,
    help="Slurm's default timeouts and requeue delay, instead of the fast test settings.",
)
@click.option(
    "--tracking",
    type=click.Choice(["auto", "cgroup", "pgid"]),
    default="auto",
    show_default=True,
    help="proctrack/cgroup with task/affinity,task/cgroup as on GPU clusters (auto: where the "
    "host mounts cgroup v1), or proctrack/pgid with task/affinity.",
)
@click.option(
    "--slurm",
    metavar="RELEASE",
    help="Slurm release: 22.05, 24.11 or 26.05 (default: the release up, else 26.05, the "
    "provider's). A release other than the host's runs from a Debian root made with "
    "debootstrap, cached.",
)
@click.option("--timeout", default=60.0, show_default=True, help="Seconds to wait for the nodes.")
@click.option(
    "--rate-limit", metavar="on|BUCKET/REFILL",
    help="Per-user RPC rate limiting (rl_enable; Slurm 23.02+): on for Slurm's defaults "
    "(30 tokens, 2 a second), or e.g. 10/1.",
)  # fmt: skip
@click.option(
    "--expedited-requeue", "expedite", is_flag=True,
    help="Allow expedited requeues (SlurmctldParameters=enable_expedited_requeue; Slurm "
    "25.11+): a job submitted with --requeue=expedite may start again at once.",
)  # fmt: skip
@click.option(
    "--shared-dir", metavar="DIR",
    help="Make DIR (empty or new) a shared filesystem every node and this host see (FUSE; "
    "its files lie beside it in .DIR.slowfs and outlive `down`).",
)  # fmt: skip
@click.option(
    "--shared-mbps", metavar="N", type=float,
    help="Cap --shared-dir's reads and writes together at N MB/s (10**6 bytes a second).",
)  # fmt: skip
def sandbox_up(
    nodes: int,
    preemptible: int,
    stock_timings: bool,
    tracking: str,
    slurm: str | None,
    timeout: float,
    rate_limit: str | None,
    expedite: bool,
    shared_dir: str | None,
    shared_mbps: float | None,
) -> None:
    """Install (if needed) and start munge, slurmctld and one slurmd per node."""
    box = sandbox_here()
    with echoed(SANDBOX):
        box.up(
            nodes,
            preemptible,
            stock_timings=stock_timings,
            tracking=tracking,
            slurm=slurm,
            timeout=timeout,
            rate_limit=rate_limit,
            expedite=expedite,
            shared_dir=shared_dir,
            shared_mbps=shared_mbps,
        )
    if box.root is not None:
        click.echo(
            f"Slurm's commands for this sandbox run in {box.root.path}: "
            f"export PATH={box.root.shims}:$PATH"
        )


@sandbox.command("fetch")
@click.option(
    "--slurm",
    "releases",
    metavar="RELEASE",
    multiple=True,
    required=True,
    help="Slurm release: 22.05, 24.11 or 26.05; give it once per release.",
)
def sandbox_fetch(releases: tuple[str, ...]) -> None:
    """Make the Debian root of each Slurm release now (cached), so a later `up --slurm`
    starts at once. Nothing is started; a root made already is kept."""
    from slurmpre.sandbox.host import host_suite, require_root
    from slurmpre.sandbox.roots import Root, suite_of

    for release in releases:
        suite_of(release)  # every release checked before any work starts
    require_root()
    for release in dict.fromkeys(releases):
        if suite_of(release) == host_suite():
            click.echo(f"Slurm {release} is this host's own: nothing to fetch")
            continue
        root = Root.for_version(release)
        with echoed(SANDBOX):
            root.ensure()
        click.echo(f"Slurm {release}: Debian {root.suite} root ready in {root.path}")


@sandbox.command("down")
def sandbox_down() -> None:
    """Stop exactly what `up` started, and the job processes it left."""
    with echoed(SANDBOX):
        sandbox_here().down()


@sandbox.command("status")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def sandbox_status(as_json: bool) -> None:
    """Say what runs where."""
    from slurmpre.sandbox.status import describe, format_report

    report = describe(sandbox_here())
    click.echo(json_document("sandbox", report) if as_json else format_report(report))
    if not report["up"]:
        raise SystemExit(1)


@sandbox.command("preempt")
@click.argument("node")
@click.option(
    "--window", default=float(defaults.PREEMPT_WINDOW), show_default=True,
    help="Seconds from drain to removal.",
)  # fmt: skip
@click.option(
    "--return-after",
    type=float,
    help="Seconds after removal when a replacement node comes back (default: never).",
)
@click.option("--reason", default="preempted", show_default=True, help="The drain reason.")
@click.option(
    "--no-mark-down",
    is_flag=True,
    help="Do not tell Slurm the node is gone; let it notice after SlurmdTimeout.",
)
@click.option(
    "--once-empty",
    is_flag=True,
    help="Remove the node as soon as no job runs on it (by T+window at the latest).",
)
@click.option("--background", is_flag=True, help="Run the timeline in the background.")
def sandbox_preempt(
    node: str,
    window: float,
    return_after: float | None,
    reason: str,
    no_mark_down: bool,
    once_empty: bool,
    background: bool,
) -> None:
    """Preempt NODE as the provider does: drain now, remove at T+window, maybe return."""
    from slurmpre.sandbox.preempt import PreemptPlan, preempt, start_in_background

    plan = PreemptPlan(
        node, window, return_after, reason, mark_down=not no_mark_down, once_empty=once_empty
    )
    box = sandbox_here()
    if background:
        pid, log = start_in_background(box, plan)
        click.echo(f"preempting {node} in the background (pid {pid}); timeline in {log}")
    else:
        box.config().node(node)
        with echoed(SANDBOX):
            preempt(box, plan)
