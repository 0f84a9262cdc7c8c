"""``slurmpre.job run``: one attempt of the job on one node, under srun: agree on the
checkpoint (`resume`), run the child (`supervise`), and on node 0 watch (`watch`). The
wrapper exits with the child's code.
"""

from __future__ import annotations

import functools
import logging
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from slurmpre import environment, lines
from slurmpre.errors import SlurmpreError
from slurmpre.folder.access import touch
from slurmpre.folder.ledger import Choice, Ledger
from slurmpre.folder.records import End
from slurmpre.job.start.args import RunOptions, parse_args
from slurmpre.job.start.env import JobEnv, read_job_env
from slurmpre.job.start.launch import check_command, launch, takes_over_early
from slurmpre.job.start.resume import (
    AttemptContext,
    agree,
    attempt_prefix,
    check_checkpoint_dir,
    take_over,
)
from slurmpre.job.start.supervise import Supervisor, relay_notice
from slurmpre.job.watch.notice import (
    DrainSource,
    NoticeSource,
    SignalSource,
)
from slurmpre.launchers import Launcher
from slurmpre.signals import Latch, quiet_thread, terminating_held
from slurmpre.slurm.client import CommandLineSlurm, SlurmClient
from slurmpre.tier.node import Attempt, NodeTier

LOG = logging.getLogger(__name__)
HEARD = ("slurmpre.job", "slurmpre.tier", "slurmpre.folder")  # the attempt's loggers

if TYPE_CHECKING:
    from pathlib import Path

    from slurmpre.job.watch.watcher import Watcher


def requeue_allowed(client: SlurmClient, job: JobEnv) -> bool:
    try:
        return client.job(job.job_id).requeue
    except SlurmpreError as exc:
        LOG.info(
            f"cannot read the job's requeue flag ({str(exc).splitlines()[0]}); assuming --requeue"
        )
        return True


# How long an ending attempt waits for its stopped watcher's last lines (its sources'
# closing counts): the watcher ends at once on a stop, unless a source's close hangs.
ENDING = 1.0


class Watching:
    """Node 0's watcher, started in the background before anything else of the attempt:
    a drain or the time-limit warning while node 0 still chooses must lead to a requeue,
    or a job whose training never started could end at its time limit. Its imports and
    first Slurm query wait for the launch (`launched`) at most ``GIVE_WAY`` seconds, so
    as not to slow it from a thread that shares the interpreter.
    """

    GIVE_WAY = 1.0

    def __init__(self, build: Callable[[], Watcher]) -> None:
        self.build = build
        self.watcher: Watcher | None = None
        self.ready = threading.Event()
        self.going = threading.Event()
        self.lock = threading.RLock()  # stop() may run again from a signal handler
        self.stopped = False
        quiet_thread(self._start, name="slurmpre-watch-start")

    def launched(self) -> None:
        """The training is launched (or will not be): build the watcher now."""
        self.going.set()

    def _start(self) -> None:
        self.going.wait(self.GIVE_WAY)
        try:
            watcher = self.build()
            with self.lock:  # a wrapper that ended before it was built: never started
                if not self.stopped:
                    watcher.start()
                    self.watcher = watcher
        except Exception as exc:  # noqa: BLE001 - the training goes on, unwatched, and says so
            LOG.info(f"the watcher could not start ({type(exc).__name__}: {exc}): not watching")
        finally:
            self.ready.set()

    def get(self) -> Watcher | None:
        """The running watcher, once it has started (None if it could not)."""
        self.ready.wait()
        return self.watcher

    def stop(self) -> None:
        self.going.set()
        with self.lock:
            self.stopped = True
            if self.watcher is not None:
                self.watcher.stop()

    def wait(self, timeout: float) -> None:
        """Wait at most ``timeout`` seconds for a stopped watcher to finish."""
        if self.watcher is not None:
            self.watcher.finished.wait(timeout)


def may_grow(at: AttemptContext) -> bool:
    """Grow back (`slurmpre.job.watch.grow`): a job on fewer nodes than its range's MAX."""
    w = at.opts.watch
    return w.grow_to is not None and w.restart == "successor" and len(at.job.nodes) < w.grow_to


def drain_source(at: AttemptContext, env: Mapping[str, str]) -> DrainSource:
    """The drain notice's source: through the user's shared drain board (one Slurm
    query per interval for all the user's jobs on the cluster), unless sharing is off
    (`slurmpre.job.watch.drainboard`). A job that may grow asks the board for every node."""
    from slurmpre.job.watch import drainboard

    where = drainboard.folder(env)
    board = None
    if where is not None:
        grows = may_grow(at)
        board = drainboard.DrainBoard(
            where, at.job.tag, at.client, at.opts.watch.interval, everything=grows
        )
    # Every node the job holds: a spare that drains is released before it is removed.
    nodes = at.job.allocation
    if board is None or not board.register(nodes):

        def said() -> None:  # once the watcher ends: what asking alone cost
            LOG.info(
                f"drain: {alone.queries} Slurm queries by this job alone, "
                f"{at.client.throttled} times told to back off by Slurm's rate limit"
            )

        alone = DrainSource(at.client, nodes, at.opts.drain_reason, close=said)
        return alone
    return DrainSource(
        board, nodes, at.opts.drain_reason, every=drainboard.READ_EVERY, close=board.close
    )


def grow_source(at: AttemptContext, drain: DrainSource) -> NoticeSource:
    """Idle preemptible nodes to grow onto: from the drain board's poll of every node (or,
    with sharing off, this job's own query of them, once per interval)."""
    from slurmpre.job.watch import drainboard, grow

    w = at.opts.watch
    board = drain.client
    if isinstance(board, drainboard.DrainBoard) and not board.broken:
        every_node, every = board.every_node, 2 * drainboard.READ_EVERY
    else:
        every_node, every = at.client.nodes, w.interval
    prefix = attempt_prefix(at.job)
    return grow.GrowSource(
        every_node,
        at.job.nodes,
        int(w.grow_to or 0),
        settle=w.grow_settle,
        min_gain=w.grow_min_gain,
        writing=lambda: grow.writing_checkpoint(at.folder, prefix),
        every=every,
        spares=w.spare_nodes,
    )


def watcher_for(
    at: AttemptContext, warning: Latch, env: Mapping[str, str]
) -> Callable[[], Watcher]:
    """``env``: the job's own environment (a successor is submitted with it)."""

    def build() -> Watcher:
        # Here, in the watcher's own thread: none of it is needed to launch the training.
        from slurmpre.job.handover.placing import ReturnSource
        from slurmpre.job.watch.watcher import Watcher

        drain = drain_source(at, env)
        sources: list[NoticeSource] = [drain, SignalSource(warning)]
        if may_grow(at):
            sources.append(grow_source(at, drain))
        goals = at.opts.watch.goals
        if goals.deadline and at.opts.watch.restart == "successor":
            every = min(60.0, 12 * at.opts.watch.interval)  # a minute at the default poll
            sources.append(
                ReturnSource(goals, at.ledger, at.client, at.opts.watch.min_nodes, every=every)
            )
        return Watcher(
            sources,
            at.job,
            at.folder,
            at.ledger,
            at.client,
            at.opts.watch,
            requeue_allowed=requeue_allowed(at.client, at.job),
            env=env,
        )

    return build


def _take_over(at: AttemptContext, supervisor: Supervisor) -> None:
    """A successor's node 0, beside its running training: choose the checkpoint once the
    predecessor has ended; if that fails, end the training rather than let it train
    beside the predecessor or from nothing."""
    try:
        take_over(at)
    except Exception as exc:  # noqa: BLE001 - said, and the training is ended
        before = "the step before" if at.job.releasing else f"job {at.job.predecessor}"
        LOG.info(f"cannot take over from {before}: {exc}; ending the training")
        supervisor.terminate()


def run_attempt(
    opts: RunOptions,
    env: Mapping[str, str],
    *,
    warning: Latch | None = None,
    client: SlurmClient | None = None,
    say: Callable[[str], None] | None = None,
) -> int:
    """One attempt on this node; the wrapper's exit code. ``say``: where the attempt's lines
    go (`HEARD`, from every thread), the job's log by default: standard error, each line
    after the node's prefix."""
    job, given = read_job_env(env), env
    prefix = f"slurmpre[{job.tag}.{job.attempt} node {job.node_id} {job.node_name}]"

    def log(message: str) -> None:
        print(f"{prefix}: {message}", file=sys.stderr, flush=True)

    say = say or log
    warning = warning or Latch()
    check_command(opts.command, env)
    folder = check_checkpoint_dir(opts.checkpoint_dir, job, opts.file_access)
    ledger = Ledger(folder, access=opts.file_access)
    ledger.ensure()
    here = Attempt(job.tag, job.restart_count, job.in_place, attempt_prefix(job), job.node_id,
                   job.node_name, job.num_nodes, job.predecessor or None,
                   adopts=job.restarted or (job.in_place > 0 and not job.releasing))  # fmt: skip
    # What the job side, the tier and a folder say, from any of the attempt's threads (the
    # watcher's, the take-over's), goes where the wrapper's lines go: ``say``, its log.
    with lines.sent_to(say, *HEARD, every_thread=True):
        return _attempt(opts, env, given, job, folder, ledger, here, warning, client)


def _attempt(
    opts: RunOptions,
    env: Mapping[str, str],
    given: Mapping[str, str],
    job: JobEnv,
    folder: Path,
    ledger: Ledger,
    here: Attempt,
    warning: Latch,
    client: SlurmClient | None,
) -> int:
    tier = NodeTier.start(opts.local_dir, env, ledger, here, opts.file_access)
    if opts.local_dir != "off":  # every node, so that ranks agree where each save goes
        env = {**env, environment.LOCAL_NODE: f"{job.node_id}/{job.num_nodes}"}
    if tier is not None:  # checkpoint() writes there first; it leaves the node from there
        env = {**env, environment.LOCAL_DIR: str(tier.run)}
    at = AttemptContext(opts, job, folder, ledger, client or CommandLineSlurm(), env)
    watching: Watching | None = None
    if job.is_first_node and opts.watching:
        # Watching starts before the choice: a drain or a warning during start-up counts.
        watching = Watching(watcher_for(at, warning, given))
    stop_relay = threading.Event()
    started_at = time.time()
    try:
        code = _train(at, agree(at), env, stop_relay, watching)

        # The child is gone. A signal now (Slurm ending the step on the requeue the
        # watcher just asked for) must not cut its records short: it stops the watcher,
        # whose requeue, once asked, is still recorded, and the attempt's end too.
        def stop_watching(_signum: int) -> None:
            if watching is not None:
                watching.stop()

        with terminating_held(stop_watching):
            _see_through(at, watching, code)
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
                    LOG.info(str(exc))
    finally:
        stop_relay.set()
        if watching is not None:
            watching.stop()
            watching.wait(ENDING)  # its last lines are written while they are heard
        if tier is not None:
            tier.finish()
    return code


def _train(
    at: AttemptContext,
    choice: Choice,
    env: Mapping[str, str],
    stop_relay: threading.Event,
    watching: Watching | None,
) -> int:
    """Run the training from ``choice`` to its end; its exit code (128 + the signal, when
    one stopped it before it started). Node 0 also takes over early when it may, and
    every node relays the notice to a script that asked for a signal."""
    opts, job, folder = at.opts, at.job, at.folder
    with Supervisor() as supervisor:
        child = supervisor.start(*launch(opts, job, choice, env, folder))
        if watching is not None:
            watching.launched()
        if child is None:
            LOG.info(f"stopped by signal {supervisor.stopped} before the training started")
            return 128 + (supervisor.stopped or 15)
        if job.is_first_node and takes_over_early(opts, job, folder):
            quiet_thread(_take_over, args=(at, supervisor), name="slurmpre-take-over")
        if opts.notice_signal is not None:
            files = job.files(folder)
            quiet_thread(
                functools.partial(
                    relay_notice,
                    workers=opts.launcher != Launcher.PLAIN,
                    taken=lambda: touch(files.taken, opts.file_access),
                ),
                args=(
                    files.notice,
                    child,
                    opts.notice_signal,
                    stop_relay,
                ),
                name="slurmpre-relay",
            )
        return supervisor.wait()


def _see_through(at: AttemptContext, watching: Watching | None, code: int) -> None:
    """The watcher alone decides: requeue (it stopped on the notice), or not (it finished
    its work); the job must not end COMPLETED before that."""
    watcher = watching.get() if watching is not None else None
    if watcher is None:
        return
    watcher.post_exit(code)
    outcome = watcher.result()
    if outcome.successor is not None:
        LOG.info(f"the training exited after the notice; job {outcome.successor} takes over")
    elif outcome.notice is not None and outcome.requeued:
        LOG.info("the training exited after the notice; the job is requeued")
    elif outcome.in_place is not None:
        LOG.info("the training exited after the notice; the next step restarts in place")


def main(
    argv: Sequence[str] | None,
    env: Mapping[str, str],
    *,
    warning: Latch | None = None,
) -> int:
    try:
        opts = parse_args(sys.argv[1:] if argv is None else argv)
        return run_attempt(opts, env, warning=warning)
    except SlurmpreError as exc:
        kind = "error: " if exc.exit_code else ""
        print(f"slurmpre run: {kind}{exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
