"""``slurmpre.job run``: one attempt of the job on one node, under srun.

Node 0 resolves the newest complete checkpoint and publishes the choice for
this attempt; every node waits for it, builds the launcher command (torchrun
with a c10d rendezvous on node 0's address, or the plain command), and runs
it in a process group of its own, forwarding Slurm's signals to the whole
tree and exiting with the child's code.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from slurmpre import procs
from slurmpre.errors import CheckpointError, SlurmpreError, UsageError
from slurmpre.job import checkpoints
from slurmpre.job.env import JobEnv, read_job_env
from slurmpre.job.ledger import Choice, Ledger
from slurmpre.job.notice import (
    RESERVED_SIGNALS,
    WARN_SIGNAL,
    listening_path,
    notice_path,
    read_notice,
    signal_named,
)
from slurmpre.job.rendezvous import Rendezvous, port_for, torchrun_argv
from slurmpre.job.watch import DrainSource, SignalSource, WatchConfig, Watcher
from slurmpre.slurm.client import CommandLineSlurm, SlurmClient

LAUNCHERS = ("torchrun", "plain")
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCONT)


@dataclass(frozen=True)
class RunOptions:
    launcher: str
    checkpoint_dir: Path
    command: tuple[str, ...]
    nproc_per_node: int | None = None
    resume_arg: str | None = None
    agree_timeout: float = 300.0
    watch: WatchConfig = field(default_factory=WatchConfig)
    watching: bool = True
    drain_reason: re.Pattern[str] | None = None
    notice_signal: signal.Signals | None = None


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def parse_args(argv: Sequence[str]) -> RunOptions:
    parser = _Parser(prog="slurmpre run", add_help=True)
    parser.add_argument("--launcher", choices=LAUNCHERS, default="torchrun")
    parser.add_argument("--checkpoint-dir", required=True)
    parser.add_argument("--nproc-per-node", type=int, default=None)
    parser.add_argument("--resume-arg", default=None)
    parser.add_argument("--agree-timeout", type=float, default=300.0)
    parser.add_argument("--poll-interval", type=float, default=5.0)
    parser.add_argument("--window", type=float, default=300.0)
    parser.add_argument("--time-warning", type=float, default=300.0)
    parser.add_argument("--safety-margin", type=float, default=30.0)
    parser.add_argument("--drain-reason", default=None)
    parser.add_argument("--notice-signal", default=None)
    parser.add_argument("--no-watch", action="store_true")
    args_list = list(argv)
    if args_list and args_list[0] == "run":
        args_list = args_list[1:]
    cut = args_list.index("--") if "--" in args_list else len(args_list)
    ns = parser.parse_args(args_list[:cut])
    if cut == len(args_list):
        raise UsageError("give the command to run after --, e.g. slurmpre run -- python train.py")
    command = tuple(args_list[cut + 1 :])
    if not command:
        raise UsageError("no command after --")
    if ns.nproc_per_node is not None and ns.nproc_per_node < 1:
        raise UsageError(f"--nproc-per-node must be 1 or more, got {ns.nproc_per_node}")
    for flag, value in (("--poll-interval", ns.poll_interval), ("--window", ns.window)):
        if not value > 0:
            raise UsageError(f"{flag} must be more than 0 seconds, got {value:g}")
    if not ns.safety_margin >= 0:
        raise UsageError(f"--safety-margin must be 0 seconds or more, got {ns.safety_margin:g}")
    reason = None
    if ns.drain_reason:
        try:
            reason = re.compile(ns.drain_reason)
        except re.error as exc:
            raise UsageError(
                f"--drain-reason {ns.drain_reason!r} is not a pattern: {exc}"
            ) from None
    notice_signal = parse_signal(ns.notice_signal) if ns.notice_signal else None
    return RunOptions(
        launcher=ns.launcher,
        checkpoint_dir=Path(ns.checkpoint_dir),
        command=command,
        nproc_per_node=ns.nproc_per_node,
        resume_arg=ns.resume_arg,
        agree_timeout=ns.agree_timeout,
        watch=WatchConfig(
            interval=ns.poll_interval,
            window=ns.window,
            time_warning=ns.time_warning,
            margin=ns.safety_margin,
        ),
        watching=not ns.no_watch,
        drain_reason=reason,
        notice_signal=notice_signal,
    )


def parse_signal(name: str) -> signal.Signals:
    """``TERM``, ``SIGUSR2`` or ``12`` -> the signal; refuses the ones slurmpre needs for itself."""
    sig = signal_named(name)
    if sig is None:
        raise UsageError(f"--notice-signal {name!r} is not a signal name")
    if sig in RESERVED_SIGNALS:
        raise UsageError(f"--notice-signal {name!r} cannot be used: choose e.g. SIGUSR1 or SIGTERM")
    return sig


def task_checkpoint_dir(base: Path, job: JobEnv) -> Path:
    """An array task keeps its own checkpoints: ``<dir>/task-<id>``."""
    return base / f"task-{job.array_task_id}" if job.array_task_id is not None else base


def check_checkpoint_dir(path: Path, job: JobEnv) -> Path:
    if not path.is_dir():
        raise CheckpointError(
            f"checkpoint folder {str(path)!r} does not exist (it must be on the shared volume; "
            "`slurmpre submit` creates it)"
        )
    if not os.access(path, os.W_OK | os.X_OK):
        raise CheckpointError(f"checkpoint folder {str(path)!r} is not writable")
    folder = task_checkpoint_dir(path, job)
    folder.mkdir(exist_ok=True)
    return folder


def check_command(command: Sequence[str]) -> None:
    exe = command[0]
    found = shutil.which(exe) if os.sep not in exe else (exe if os.access(exe, os.X_OK) else None)
    if found is None and not (exe.endswith(".py") and Path(exe).is_file()):
        raise UsageError(f"command not found: {exe!r}")


def nproc_for(opts: RunOptions, job: JobEnv) -> int:
    return opts.nproc_per_node or job.gpus_on_node or 1


def node_address(client: SlurmClient, node: str) -> str:
    """Node 0's address as Slurm knows it (NodeAddr), not a guessed hostname."""
    try:
        infos = client.nodes([node])
    except SlurmpreError:
        return node
    return (infos[0].address if infos and infos[0].address else None) or node


def agree(
    opts: RunOptions,
    job: JobEnv,
    folder: Path,
    ledger: Ledger,
    client: SlurmClient,
    say: Callable[[str], None],
) -> Choice:
    """Node 0 chooses the checkpoint for this attempt; the others wait for its choice."""
    if not job.is_first_node:
        return ledger.wait_choice(job.tag, job.restart_count, opts.agree_timeout)
    found = checkpoints.latest(folder)
    for skipped in found.skipped:
        say(f"passing over {skipped.path.name}: {skipped.reason}")
    ckpt = found.checkpoint
    previous = ledger.previous_start(job.tag, job.restart_count)
    world = job.num_nodes * nproc_for(opts, job)
    choice = Choice(
        job=job.tag,
        attempt=job.restart_count,
        resume_from=str(ckpt.path) if ckpt else None,
        step=ckpt.step if ckpt else None,
        nodes=job.nodes,
        world_size=world,
        previous_world_size=previous.get("world_size") if previous else None,
        rdzv_endpoint=(
            f"{node_address(client, job.nodes[0])}:{port_for(job.job_id)}"
            if opts.launcher == "torchrun"
            else ""
        ),
        published_at=time.time(),
    )
    ledger.publish(choice)
    ledger.append(
        {
            "event": "start",
            "job": job.tag,
            "attempt": job.restart_count,
            "nodes": list(job.nodes),
            "num_nodes": job.num_nodes,
            "world_size": world,
            "resume_from": choice.resume_from,
            "step": choice.step,
        }
    )
    if ckpt is None:
        say("no complete checkpoint yet: starting fresh")
    else:
        say(f"resuming from {ckpt.path} (step {ckpt.step}, {ckpt.reason})")
    return choice


def child_command(opts: RunOptions, job: JobEnv, choice: Choice) -> list[str]:
    command = list(opts.command)
    if opts.resume_arg and choice.resume_from:
        command += [opts.resume_arg, choice.resume_from]
    if opts.launcher == "plain":
        return command
    host, _, port = choice.rdzv_endpoint.rpartition(":")
    rdzv = Rendezvous(
        host=host,
        port=int(port),
        run_id=f"{job.tag}-{job.restart_count}",
        nnodes=job.num_nodes,
        nproc_per_node=nproc_for(opts, job),
        node_rank=job.node_id,
    )
    return torchrun_argv(command, rdzv)


def child_env(
    env: Mapping[str, str], opts: RunOptions, job: JobEnv, folder: Path, choice: Choice
) -> dict[str, str]:
    """What the training process sees, on top of the job's own environment."""
    out = dict(env)
    out.update(
        {
            "SLURMPRE_CHECKPOINT_DIR": str(folder),
            "SLURMPRE_RESUME_FROM": choice.resume_from or "",
            "SLURMPRE_RESUME_STEP": "" if choice.step is None else str(choice.step),
            "SLURMPRE_RESTART_COUNT": str(job.restart_count),
            "SLURMPRE_JOB_TAG": job.tag,
            "SLURMPRE_NUM_NODES": str(job.num_nodes),
            "SLURMPRE_WORLD_SIZE": str(choice.world_size),
            "SLURMPRE_PREVIOUS_WORLD_SIZE": ""
            if choice.previous_world_size is None
            else str(choice.previous_world_size),
            "SLURMPRE_NOTICE_FILE": str(notice_path(folder, job.tag, job.restart_count)),
            "SLURMPRE_LISTENING_FILE": str(listening_path(folder, job.tag, job.restart_count)),
        }
    )
    return out


def supervise(
    command: Sequence[str],
    env: Mapping[str, str],
    *,
    on_warning: Callable[[], None] | None = None,
    on_start: Callable[[subprocess.Popen[bytes]], None] | None = None,
) -> int:
    """Run the child in its own process group; forward Slurm's signals to all of it.

    The time-limit warning (SIGUSR2 from the template's ``--signal``) is not
    forwarded: it goes to ``on_warning`` (the watcher), and is ignored on the
    other nodes rather than killing the wrapper.
    """
    try:
        child = subprocess.Popen(list(command), env=dict(env), start_new_session=True)
    except FileNotFoundError:
        raise UsageError(f"command not found: {command[0]!r}") from None
    except PermissionError:
        raise UsageError(f"command is not executable: {command[0]!r}") from None

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signum)

    def warning(_signum: int, _frame: object) -> None:
        if on_warning is not None:
            on_warning()

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    previous[WARN_SIGNAL] = signal.signal(WARN_SIGNAL, warning)
    done = threading.Event()
    guard_tree(child, done)
    try:
        if on_start is not None:
            on_start(child)
        code = child.wait()
    finally:
        done.set()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        # Stragglers of the child's group (a worker that outlived its launcher).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGTERM)
    return code if code >= 0 else 128 - code


TRACK_SECONDS = 2.0


def guard_tree(child: subprocess.Popen[bytes], done: threading.Event) -> None:
    """Start the guard (slurmpre.job.guard) and keep it told of the child's whole tree.

    If this wrapper is killed, the guard's stdin closes and it ends the tree,
    including processes in sessions of their own that Slurm's process-group
    tracking would leave behind.
    """
    try:
        guard = subprocess.Popen(
            [sys.executable, "-m", "slurmpre.job.guard"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            text=True,
        )
    except OSError:
        return  # no guard: Slurm's own kill still applies
    stdin = guard.stdin
    if stdin is None:
        return

    def track() -> None:
        while True:
            tree = {child.pid} | procs.descendants([child.pid])
            lines = [f"{pid} {start}" for pid in tree if (start := procs.start_time(pid))]
            try:
                stdin.write("\n".join(lines) + "\n\n")
                stdin.flush()
            except (BrokenPipeError, ValueError):
                return
            if done.wait(TRACK_SECONDS):
                return  # the stream stays open until this process ends

    threading.Thread(target=track, name="slurmpre-guard", daemon=True).start()


def relay_notice(
    path: Path, child: subprocess.Popen[bytes], sig: signal.Signals, stop: threading.Event
) -> None:
    """On every node: when the notice file appears, send ``sig`` to the child's group once."""
    while not stop.wait(1.0):
        if read_notice(path) is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, sig)
            return


def requeue_allowed(client: SlurmClient, job: JobEnv, say: Callable[[str], None]) -> bool:
    try:
        return client.job(job.job_id).requeue
    except SlurmpreError as exc:
        say(f"cannot read the job's requeue flag ({str(exc).splitlines()[0]}); assuming --requeue")
        return True


def run_attempt(
    opts: RunOptions,
    env: Mapping[str, str],
    *,
    client: SlurmClient | None = None,
    say: Callable[[str], None] | None = None,
) -> int:
    job = read_job_env(env)
    prefix = f"slurmpre[{job.tag}.{job.restart_count} node {job.node_id} {job.node_name}]"

    def log(message: str) -> None:
        print(f"{prefix}: {message}", file=sys.stderr, flush=True)

    say = say or log
    check_command(opts.command)
    folder = check_checkpoint_dir(opts.checkpoint_dir, job)
    ledger = Ledger(folder)
    ledger.ensure()
    client = client or CommandLineSlurm()
    choice = agree(opts, job, folder, ledger, client, say)
    command = child_command(opts, job, choice)
    stop = threading.Event()
    signal_source = SignalSource()
    watcher: Watcher | None = None
    if job.is_first_node and opts.watching:
        watcher = Watcher(
            [DrainSource(client, job.nodes, opts.drain_reason), signal_source],
            job,
            folder,
            ledger,
            client,
            opts.watch,
            requeue_allowed=requeue_allowed(client, job, say),
            say=say,
        )

    def started(child: subprocess.Popen[bytes]) -> None:
        if watcher is not None:
            watcher.start()
        if opts.notice_signal is not None:
            threading.Thread(
                target=relay_notice,
                args=(
                    notice_path(folder, job.tag, job.restart_count),
                    child,
                    opts.notice_signal,
                    stop,
                ),
                name="slurmpre-relay",
                daemon=True,
            ).start()

    started_at = time.time()
    try:
        code = supervise(
            command,
            child_env(env, opts, job, folder, choice),
            on_warning=signal_source.trigger,
            on_start=started,
        )
        if watcher is not None and watcher.notice is not None and not watcher.done:
            if code == 0 and watcher.committed_since_notice() is None:
                # It ended well with no checkpoint for the notice: it finished its
                # work; a requeue would only run it again from an older step.
                say("the training finished after the notice: its work is done, not requeuing")
                watcher.skip("the training finished")
            else:
                # It saved and stopped on the notice: do not let the job end as
                # COMPLETED before the watcher has requeued it.
                say("the training exited after the notice; waiting for the requeue")
                watcher.finished.wait(timeout=watcher.seconds_left() + 5.0)
    finally:
        stop.set()
        if watcher is not None:
            watcher.stop()
    if job.is_first_node:
        ledger.append(
            {
                "event": "end",
                "job": job.tag,
                "attempt": job.restart_count,
                "exit_code": code,
                "seconds": round(time.time() - started_at, 3),
            }
        )
    return code


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    try:
        opts = parse_args(sys.argv[1:] if argv is None else argv)
        return run_attempt(opts, os.environ if env is None else env)
    except SlurmpreError as exc:
        print(f"slurmpre run: error: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
