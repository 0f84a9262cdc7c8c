"""``slurmpre.job run``: one attempt of the job on one node, under srun.

The steps, each in a module of its own: the command line (`args`), the
checkpoint this attempt resumes from, agreed by all nodes (`resume`), the
child and Slurm's signals (`supervise`), and on node 0 the watcher that turns
a drain or the time-limit warning into a checkpoint and a requeue (`watch`,
deciding by `requeue`). The wrapper exits with the child's code.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from slurmpre.errors import SlurmpreError
from slurmpre.job.args import RunOptions, parse_args
from slurmpre.job.env import JobEnv, read_job_env
from slurmpre.job.ledger import Ledger
from slurmpre.job.notice import DrainSource, SignalSource, notice_path
from slurmpre.job.records import End
from slurmpre.job.resume import (
    agree,
    check_checkpoint_dir,
    check_command,
    child_command,
    child_env,
)
from slurmpre.job.supervise import Supervisor, relay_notice
from slurmpre.signals import Latch, quiet_thread, terminating_held
from slurmpre.slurm.client import CommandLineSlurm, SlurmClient

if TYPE_CHECKING:
    from slurmpre.job.watch import Watcher


def requeue_allowed(client: SlurmClient, job: JobEnv, say: Callable[[str], None]) -> bool:
    try:
        return client.job(job.job_id).requeue
    except SlurmpreError as exc:
        say(f"cannot read the job's requeue flag ({str(exc).splitlines()[0]}); assuming --requeue")
        return True


def start_watcher(
    opts: RunOptions,
    job: JobEnv,
    folder: Path,
    ledger: Ledger,
    client: SlurmClient,
    warning: Latch,
    say: Callable[[str], None],
) -> Watcher:
    from slurmpre.job.watch import Watcher  # here: off the path to the training

    watcher = Watcher(
        [DrainSource(client, job.nodes, opts.drain_reason), SignalSource(warning)],
        job,
        folder,
        ledger,
        client,
        opts.watch,
        requeue_allowed=requeue_allowed(client, job, say),
        say=say,
    )
    watcher.start()
    return watcher


def run_attempt(
    opts: RunOptions,
    env: Mapping[str, str],
    *,
    warning: Latch | None = None,
    client: SlurmClient | None = None,
    say: Callable[[str], None] | None = None,
) -> int:
    job = read_job_env(env)
    prefix = f"slurmpre[{job.tag}.{job.attempt} node {job.node_id} {job.node_name}]"

    def log(message: str) -> None:
        print(f"{prefix}: {message}", file=sys.stderr, flush=True)

    say = say or log
    warning = warning or Latch()
    check_command(opts.command)
    folder = check_checkpoint_dir(opts.checkpoint_dir, job, opts.file_access)
    ledger = Ledger(folder, access=opts.file_access)
    ledger.ensure()
    client = client or CommandLineSlurm()
    watcher: Watcher | None = None
    stop_relay = threading.Event()
    started_at = time.time()
    try:
        choice = agree(opts, job, folder, ledger, client, say)
        with Supervisor() as supervisor:
            child = supervisor.start(
                child_command(opts, job, choice, env), child_env(env, opts, job, folder, choice)
            )
            if child is None:
                code = 128 + (supervisor.stopped or 15)
                say(f"stopped by signal {supervisor.stopped} before the training started")
            else:
                if job.is_first_node and opts.watching:
                    # Started once the training is on its way: nothing is lost by it (a
                    # node that drained during start-up is still draining, the warning is
                    # latched), and its imports and Slurm query stay off that path.
                    watcher = start_watcher(opts, job, folder, ledger, client, warning, say)
                if opts.notice_signal is not None:
                    quiet_thread(
                        relay_notice,
                        args=(
                            notice_path(folder, job.tag, job.attempt),
                            child,
                            opts.notice_signal,
                            stop_relay,
                        ),
                        name="slurmpre-relay",
                    )
                code = supervisor.wait()

        # The child is gone. A signal now (Slurm ending the step on the requeue the
        # watcher just asked for) must not cut its records short: it stops the watcher,
        # whose requeue, once asked, is still recorded, and the attempt's end too.
        def stop_watching(_signum: int) -> None:
            if watcher is not None:
                watcher.stop()

        with terminating_held(stop_watching):
            if watcher is not None:
                # The watcher alone decides: requeue (it stopped on the notice), or not
                # (it finished its work); the job must not end COMPLETED before that.
                watcher.post_exit(code)
                outcome = watcher.result(timeout=watcher.longest_wait())
                if outcome.successor is not None:
                    say(f"the training exited after the notice; job {outcome.successor} takes over")
                elif outcome.notice is not None and outcome.requeued:
                    say("the training exited after the notice; the job is requeued")
                elif outcome.in_place is not None:
                    say("the training exited after the notice; the next step restarts in place")
            if job.is_first_node:
                try:
                    ledger.append(
                        End(
                            job=job.tag,
                            attempt=job.restart_count,
                            in_place=job.in_place,
                            exit_code=code,
                            seconds=round(time.time() - started_at, 3),
                        )
                    )
                except SlurmpreError as exc:
                    say(str(exc))
    finally:
        stop_relay.set()
        if watcher is not None:
            watcher.stop()
    return code


def main(
    argv: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    *,
    warning: Latch | None = None,
) -> int:
    try:
        opts = parse_args(sys.argv[1:] if argv is None else argv)
        return run_attempt(opts, os.environ if env is None else env, warning=warning)
    except SlurmpreError as exc:
        print(f"slurmpre run: error: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
