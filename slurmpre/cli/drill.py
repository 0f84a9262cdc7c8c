"""``slurmpre drill``: preempt a real job on the sandbox, with the seeds' recipe beside it."""

from __future__ import annotations

from pathlib import Path

import click

from slurmpre.cli.common import echoed, json_document, sandbox_here
from slurmpre.errors import SlurmpreError


@click.command()
@click.option("--preemptions", default=3, show_default=True, help="How many preemptions.")
@click.option(
    "--window", default=60.0, show_default=True, help="Seconds from drain to node removal."
)
@click.option(
    "--checkpoint-interval",
    "every",
    default=500,
    show_default=True,
    help="Steps between periodic checkpoints (the provider's recipe: 500, longer than the window).",
)
@click.option("--seed", type=int, help="Replay a schedule (printed by each run).")
@click.option(
    "--baseline", is_flag=True, help="Also run the seeds' recipe under the same schedule."
)
@click.option(
    "--stock-timings/--tuned-timings",
    default=True,
    show_default=True,
    help="Slurm's default timings, which users have (a requeue waits >= 121 s), or the "
    "sandbox's quick ones (for tests).",
)
@click.option("--steps", type=int, help="Training steps (default: enough for every preemption).")
@click.option(
    "--capacity-scene/--no-capacity-scene",
    "capacity",
    default=True,
    show_default=True,
    help='Also run a "1-2" job whose second node comes back later: it must grow back.',
)
@click.option(
    "--big-state-mb",
    type=int,
    default=512,
    show_default=True,
    help="Also run a one-node job with this many MB of state, saved on the node, its folder "
    "too slow to take it within the window (0: no such scene).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the timeline and summary as JSON.")
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("/var/lib/slurmpre/drill"),
    show_default=True,
    help="Where each run keeps its checkpoints and logs (a folder per run).",
)
@click.option(
    "--report",
    "recorded",
    type=click.Path(path_type=Path),
    help="Run nothing: print the report of a past run (its folder or its timelines.json).",
)
def drill(
    recorded: Path | None,
    preemptions: int,
    window: float,
    every: int,
    seed: int | None,
    baseline: bool,
    stock_timings: bool,
    steps: int | None,
    capacity: bool,
    big_state_mb: int,
    as_json: bool,
    workdir: Path,
) -> None:
    """Preempt a real training job on the local sandbox and show that no work is lost."""
    from slurmpre.drill.options import DrillOptions, DrillResult
    from slurmpre.drill.run import run_drill
    from slurmpre.drill.table import render
    from slurmpre.drill.timeline import FILE

    opts = DrillOptions(
        preemptions=preemptions,
        window=window,
        every=every,
        seed=seed,
        baseline=baseline,
        stock_timings=stock_timings,
        steps=steps,
        capacity=capacity,
        big_state_mb=big_state_mb,
        workdir=workdir,
    )
    if recorded is not None:
        result = DrillResult.load(recorded / FILE if recorded.is_dir() else recorded)
    else:
        with echoed("slurmpre.drill", "slurmpre.sandbox", err=as_json):
            result = run_drill(sandbox_here(), opts)
    for line in render(result):
        click.echo(line, err=as_json)
    if as_json:
        click.echo(json_document("drill", result.as_dict()))
    failures = result.failures()
    if failures:
        raise SlurmpreError("drill failed: " + "; ".join(failures))
