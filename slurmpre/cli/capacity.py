"""``slurmpre nodes`` and ``plan``: preemptible capacity, and what checkpointing costs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from slurmpre.cli.common import folder_arg, json_document, prices
from slurmpre.errors import CommandError


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def nodes(as_json: bool) -> None:
    """Preemptible against standard capacity; draining nodes and your jobs on them."""
    import getpass

    from slurmpre.login.capacity import capacity, lines
    from slurmpre.slurm.client import default_client

    client = default_client()
    cap = capacity(client.nodes(), client.jobs(), getpass.getuser())
    if as_json:
        click.echo(json_document("nodes", cap.as_dict()))
        return
    for line in lines(cap):
        click.echo(line)


@click.command()
@click.argument("folders", nargs=-1)
@click.option("--checkpoint-seconds", type=float, help="One checkpoint's write.")
@click.option("--mtbf", type=float, help="Seconds of running per preemption.")
@click.option("--restart-seconds", type=float, help="Requeue to training again.")
@click.option("--window", type=float, help="Drain to removal (default 300).")
@click.option("--margin", type=float, help="Safety margin (default 30).")
@click.option("--notice-seconds", type=float, help="Drain to notice (default 5).")
@click.option(
    "--local-save-seconds", "save_seconds", type=float,
    help="With local_dir: a save on the nodes (else measured, when the ledgers hold one).",
)  # fmt: skip
@click.option(
    "--pull-seconds", type=float,
    help="With local_dir: the pull by the job that takes over (else measured, or 0).",
)  # fmt: skip
@click.option(
    "--deadline",
    metavar="WHEN",
    help="Forecast a deadline instead (ISO 8601 time, or a duration from the first submit): "
    "the chance to make it and the cost of each placement policy.",
)
@click.option("--total-steps", type=int, help="(--deadline) The step to reach.")
@click.option("--steps-done", type=int, help="(--deadline) Steps done so far.")
@click.option("--rate", type=float, help="(--deadline) Steps per second.")
@click.option(
    "--wait-seconds",
    type=float,
    help="(--deadline) Mean wait for preemptible capacity after a preemption.",
)
@click.option("--nodes", "node_count", type=int, help="Training nodes (--deadline, --spares).")
@click.option(
    "--gpus-per-node",
    type=int,
    help="(--deadline) A node's GPUs, which --price is per (else --spec's gpus_per_node).",
)
@click.option(
    "--spec",
    "spec_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="(--deadline) The job's spec: its gpus_per_node.",
)
@click.option(
    "--spares",
    type=int,
    help="Also compare K hot spares with handing over and with shrinking and growing back.",
)
@click.option("--swap-seconds", type=float, help="(--spares) In-place restart.")
@click.option(
    "--return-seconds",
    type=float,
    help="(--spares) A lost node's capacity back, after the loss.",
)
@click.option(
    "--traces",
    type=click.IntRange(1, 100_000),
    default=200,
    show_default=True,
    help="(--deadline) Capacity traces replayed.",
)
@click.option("--seed", type=int, help="(--deadline) The traces' seed.")
@prices
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def plan(
    folders: tuple[str, ...],
    checkpoint_seconds: float | None,
    mtbf: float | None,
    restart_seconds: float | None,
    window: float | None,
    margin: float | None,
    notice_seconds: float | None,
    save_seconds: float | None,
    pull_seconds: float | None,
    deadline: str | None,
    total_steps: int | None,
    steps_done: int | None,
    rate: float | None,
    wait_seconds: float | None,
    node_count: int | None,
    gpus_per_node: int | None,
    spec_file: Path | None,
    spares: int | None,
    swap_seconds: float | None,
    return_seconds: float | None,
    traces: int,
    seed: int | None,
    price: float,
    discount: float,
    as_json: bool,
) -> None:
    """How often to checkpoint, the goodput, and the cost per useful GPU-hour.

    Measures what it can in the ledgers of the checkpoint FOLDERS given (checkpoint
    write time, running time per preemption, restart: a requeue or a successor to its
    start); options override. With no restart measured there: your other jobs' restarts,
    else the running Slurm's requeue floor.

    With --deadline: the chance to finish by then, and the expected cost, of always
    preemptible, always standard, and the fallback policy a job with that deadline runs,
    replayed over capacity traces drawn from the measured (or given) preemptions and waits.

    With --spares K: what K hot spares (`spare_nodes`) cost and save against handing over
    and against shrinking in place and growing back, in goodput, money and wall time.
    """
    if deadline is not None:
        from slurmpre.login import forecast

        asked = forecast.Asked(
            deadline=deadline, total_steps=total_steps, steps_done=steps_done, rate=rate,
            mtbf_s=mtbf, wait_s=wait_seconds, restart_s=restart_seconds,
            checkpoint_s=checkpoint_seconds, nodes=node_count, price=price, discount=discount,
            traces=traces, seed=seed, gpus_per_node=gpus_per_node, spec=spec_file,
        )  # fmt: skip
        _forecast(folders, asked, as_json)
        return
    from slurmpre.login.plan import Given

    given = Given(
        checkpoint_s=checkpoint_seconds, mtbf_s=mtbf, restart_s=restart_seconds,
        window_s=window, margin_s=margin, notice_s=notice_seconds, price=price,
        discount=discount, save_s=save_seconds, pull_s=pull_seconds,
    )  # fmt: skip
    more = None
    if spares is not None:
        more = {"spares": spares, "nodes": node_count, "swap_s": swap_seconds,
                "return_s": return_seconds}  # fmt: skip
    _interval_plan(folders, given, as_json, more)


def _forecast(folders: tuple[str, ...], asked: Any, as_json: bool) -> None:
    """`plan --deadline`: the seed first (drawn when not given), then each policy."""
    import dataclasses
    import random

    from slurmpre.login import forecast

    if asked.seed is None:
        asked = dataclasses.replace(asked, seed=random.SystemRandom().randrange(2**32))
    found = forecast.forecast([folder_arg(f) for f in folders], asked)
    if as_json:
        click.echo(json_document("plan-deadline", {"seed": asked.seed, **found.as_dict()}))
        return
    click.echo(f"seed {asked.seed} (the same traces again: --seed {asked.seed})")
    for line in forecast.lines(found):
        click.echo(line)


def _interval_plan(
    folders: tuple[str, ...], given: Any, as_json: bool, spares: dict[str, Any] | None
) -> None:
    """`plan`: the checkpoint interval, goodput and cost, from the ledgers and options;
    with ``spares``, the spares rows (`slurmpre.login.spares`)."""
    from slurmpre.login import spares as hot
    from slurmpre.login.plan import inputs_from, ledgers, lines, make_plan

    def requeue_floor() -> int | None:
        from slurmpre.slurm.client import default_client
        from slurmpre.slurm.parse import requeue_floor as floor

        try:
            return floor(default_client().config())
        except CommandError:
            return None

    def history() -> list[Path]:
        """The folders of the user's last 50 submissions (an array's task by task)."""
        from slurmpre.login import jobs

        return [Path(t.checkpoint_dir) for e in jobs.known()[-50:] for t in e.tasks()]

    paths = [folder_arg(f) for f in folders]
    inputs = inputs_from(paths, given, requeue_floor, history)
    result = make_plan(inputs)
    extra: list[str] = []
    document = result.as_dict()
    if spares is not None:
        held = hot.inputs_from(ledgers(paths), inputs, from_folders=bool(paths), **spares)
        rows = hot.ways(held)
        extra, document["spares"] = hot.lines(held, rows), hot.as_dict(held, rows)
    if as_json:
        click.echo(json_document("plan", document))
        return
    for line in [*lines(result), *extra]:
        click.echo(line)
