"""Bring the sandbox up, inspect it, take it down.

Every daemon is started here in the foreground of its own session and
recorded by pid in ``<state_dir>/sandbox.json``; ``down`` stops exactly those
pids (checked against their executable), the job processes their nodes hold,
and the helpers (a background ``preempt``) that were recorded beside them.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
from dataclasses import asdict
from pathlib import Path

from filelock import FileLock, Timeout

from slurmpre import procs
from slurmpre.atomic import write_atomic
from slurmpre.cmd import run
from slurmpre.errors import SandboxError
from slurmpre.sandbox import shared_fs
from slurmpre.sandbox.asked import Asked, refuse_another_shape, shared_words
from slurmpre.sandbox.config import (
    SandboxConfig,
    State,
    expedite_parameter,
    node_specs,
    parse_topology,
    rate_limit_parameters,
)
from slurmpre.sandbox.daemons import (
    helpers_running,
    require_multiple_slurmd,
    running,
    spawn_detached,
    start_munge,
    wait_ctld,
    wait_nodes_up,
)
from slurmpre.sandbox.files import lay_out, refuse_foreign_config
from slurmpre.sandbox.host import (
    ensure_installed,
    host_suite,
    port_in_use,
    require_root,
)
from slurmpre.sandbox.instance import (
    FIRST,
    STATE_FILE,
    Instance,
    from_env,
    sandbox_env,
    state_dir_of,
)
from slurmpre.sandbox.roots import DEFAULT_RELEASE, ROOTS_DIR, Root, slurm_path, suite_of
from slurmpre.sandbox.sharing import MOUNTS_LOCK, leave, others_up
from slurmpre.sandbox.tracking import choose_tracking, clean_cgroups, slurm_plugins
from slurmpre.slurm.client import CommandLineSlurm
from slurmpre.slurm.parse import format_version, parse_version

LOG = logging.getLogger(__name__)


class Sandbox:
    def __init__(self, state_dir: Path | None = None, *, instance: Instance = FIRST) -> None:
        self.instance = instance
        self.state_dir = instance.state_dir if state_dir is None else state_dir
        self.hostname = socket.gethostname().split(".")[0]
        self.root: Root | None = None  # set from the state: a Slurm other than the host's
        self.client = CommandLineSlurm(timeout=15, env=self.env)

    @classmethod
    def here(cls, env: dict[str, str] | None = None) -> Sandbox:
        """The sandbox this environment names: ``$SLURMPRE_SANDBOX`` (0 unless set), its
        state in ``$SLURMPRE_SANDBOX_DIR`` when that is set."""
        given = dict(os.environ) if env is None else env
        return cls(state_dir_of(given), instance=from_env(given))

    def _enter(self, root: Root | None) -> None:
        """This object's Slurm commands and config are the root's from now on (or the
        host's); the process's own PATH is left as it is (see `use`)."""
        self.root = root
        self.client = CommandLineSlurm(timeout=15, env=self.env)

    @property
    def etc(self) -> Path:
        """The folder of this sandbox's configuration, as the host reaches it."""
        inside = self.instance.etc
        return inside if self.root is None else self.root.path / inside.relative_to("/")

    @property
    def env(self) -> dict[str, str]:
        """This process's environment, with the sandbox's Slurm commands first on PATH and
        its slurm.conf named: what a command the sandbox runs gets (and a job it submits)."""
        path = slurm_path(os.environ.get("PATH", ""), self.root)
        return {**os.environ, "PATH": path, **sandbox_env(self.instance)}

    def use(self) -> None:
        """Put the sandbox's Slurm commands first on this process's PATH and its config in
        SLURM_CONF, for a caller that runs them or submits jobs (which inherit both)."""
        env = self.env
        for key in ("PATH", *sandbox_env(self.instance)):
            os.environ[key] = env[key]

    @property
    def conf_arg(self) -> str:
        """slurm.conf as the daemons see it (inside the root, when there is one)."""
        return str(self.instance.conf)

    def _argv(self, argv: list[str]) -> list[str]:
        return argv if self.root is None else self.root.argv(argv)

    # -- state file ---------------------------------------------------------
    @property
    def state_file(self) -> Path:
        return self.state_dir / STATE_FILE

    def lock(self) -> FileLock:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        return FileLock(str(self.state_dir / "sandbox.lock"))

    def load(self) -> State | None:
        try:
            data = json.loads(self.state_file.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise SandboxError(f"cannot read {self.state_file}: {exc}") from None
        state = State(**data)
        self.instance = Instance(state.instance)
        has_root = state.root is not None and state.suite is not None
        self._enter(Root(state.suite, Path(state.root)) if has_root else None)  # type: ignore[arg-type]
        return state

    def save(self, state: State) -> None:
        write_atomic(self.state_file, json.dumps(asdict(state), indent=2) + "\n")

    def current(self) -> State:
        """The recorded state of a sandbox that is up (an error when it is not)."""
        state = self.load()
        if state is None:
            raise SandboxError("the sandbox is not up: run `slurmpre sandbox up`")
        return state

    def config(self) -> SandboxConfig:
        return self.current().config(self.state_dir, self.hostname)

    # -- health -------------------------------------------------------------
    def daemons_alive(self, state: State) -> bool:
        if state.slurmctld is None or not procs.is_process_of(state.slurmctld, "slurmctld"):
            return False
        return all(
            n.get("pid") is not None and procs.is_process_of(n["pid"], "slurmd")
            for n in state.nodes
        )

    # -- up -----------------------------------------------------------------
    def up(
        self,
        nodes: int = 3,
        preemptible: int = 2,
        *,
        stock_timings: bool = False,
        tracking: str = "auto",
        slurm: str | None = None,
        timeout: float = 60.0,
        rate_limit: str | None = None,
        expedite: bool = False,
        shared_dir: str | None = None,
        shared_mbps: float | None = None,
    ) -> State:
        specs = node_specs(nodes, preemptible, self.instance)
        shared = shared_fs.checked(shared_dir, shared_mbps, self.state_dir, self.instance)
        if rate_limit is not None:
            rate_limit_parameters(rate_limit, (99, 0, 0))  # its form, before anything starts
        suite: str | None = suite_of(slurm or DEFAULT_RELEASE)  # none asked: the one up
        if suite == host_suite():
            suite = None  # the host's own packages are that release
        asked = Asked(specs, stock_timings, tracking, suite, slurm is not None, rate_limit,
                      expedite, shared)  # fmt: skip
        require_root()
        with self.lock():
            state = self.load()
            if (
                state is not None
                and self.daemons_alive(state)
                and shared_fs.alive(state.shared, self.instance)
            ):
                refuse_another_shape(state, asked)
                wait_nodes_up(self.client, state, self.state_dir / "log", timeout)
                LOG.info("sandbox already up")
                return state
            if state is not None:
                LOG.info("cleaning up a sandbox that is not healthy")
                self._down_locked(state)
            self._stop_strays()
            with FileLock(str(MOUNTS_LOCK)):  # a root shared with others is not remounted
                return self._cold_start(asked, timeout)

    def _cold_start(self, asked: Asked, timeout: float) -> State:
        specs, shared, rate_limit = asked.specs, asked.shared, asked.rate_limit
        if shared is not None:
            shared_fs.ensure_fuse()  # before anything starts
        root = self._install(asked.suite)
        version = parse_version(run(self._argv(["slurmd", "-V"]), error=SandboxError).stdout)
        cfg = SandboxConfig(
            hostname=self.hostname,
            state_dir=self.state_dir,
            version=version,
            nodes=specs,
            timings=asked.timings,
            tracking=choose_tracking(asked.tracking, slurm_plugins(root)),
            topology=parse_topology(run(self._argv(["slurmd", "-C"]), error=SandboxError).stdout),
            rate_limit=None if rate_limit is None else rate_limit_parameters(rate_limit, version),
            expedite=expedite_parameter(asked.expedite, version),
            instance=self.instance,
        )
        lay_out(cfg, self.state_dir, self.etc)
        state = State(
            version=list(version),
            timings=cfg.timings.name,
            nodes=[{**asdict(s), "pid": None} for s in specs],
            tracking=cfg.tracking.name,
            root=None if root is None else str(root.path),
            suite=asked.suite,
            rate_limit=rate_limit,
            expedite=asked.expedite,
            instance=self.instance.number,
            shared=None if shared is None else shared.record(),
        )
        self.save(state)
        if shared is not None:  # mounted before any node starts: every job sees it
            pid = shared_fs.mount(shared, self.instance, root, cfg.log_dir / "slowfs.out")
            state.shared = shared.record(pid)
            self.save(state)
        self._start_daemons(cfg, state, root, timeout)
        LOG.info(
            f"sandbox up: Slurm {format_version(version)}, {len(specs)} nodes "
            f"({sum(s.preemptible for s in specs)} preemptible), {cfg.timings.name} timings, "
            f"proctrack/{cfg.tracking.proctrack}, TaskPlugin={cfg.tracking.task_plugin}"
            + (f", SlurmctldParameters={cfg.ctld_parameters}" if cfg.ctld_parameters else "")
            + (f"; {shared_words(state.shared)} (FUSE)" if state.shared else "")
        )
        return state

    def _install(self, suite: str | None) -> Root | None:
        """The host's Slurm, or a Debian root of ``suite`` mounted: ready to run, on a
        host where no other slurmctld runs and no real cluster's config would be replaced."""
        root = None
        if suite is None:
            ensure_installed()
        else:
            root = Root(suite, ROOTS_DIR / suite)
            root.ensure()
        self._enter(root)
        refuse_foreign_config(self.etc)
        port = self.instance.ctld_port
        if port_in_use(port):
            raise SandboxError(
                f"port {port} is in use: another slurmctld runs here that the sandbox did not "
                "start; stop it first"
            )
        if root is not None:
            # Another sandbox of this release has the root mounted already: keep its mounts.
            root.mount(self.state_dir, keep=bool(others_up(self.state_dir, root.path)))
        return root

    def _start_daemons(
        self, cfg: SandboxConfig, state: State, root: Root | None, timeout: float
    ) -> None:
        """munged, slurmctld, then one slurmd per node; each recorded as it starts."""
        state.munged = start_munge(cfg.log_dir, root)
        self.save(state)
        state.slurmctld = self._spawn(
            ["slurmctld", "-D", "-i", "-f", self.conf_arg],
            cfg.log_dir / "slurmctld.out",
        )
        self.save(state)
        wait_ctld(self.env, cfg.log_dir, timeout)
        if len(state.nodes) > 1:
            require_multiple_slurmd(self.env)
        for node in state.nodes:
            node["pid"] = self.start_slurmd(cfg, node["name"])
        self.save(state)
        wait_nodes_up(self.client, state, self.state_dir / "log", timeout)

    def _spawn(self, argv: list[str], log: Path) -> int:
        return spawn_detached(self._argv(argv), log).pid

    def start_slurmd(self, cfg: SandboxConfig, name: str) -> int:
        spool = cfg.spool_dir(name)
        spool.mkdir(parents=True, exist_ok=True)
        return self._spawn(
            ["slurmd", "-D", "-N", name, "-f", self.conf_arg],
            cfg.log_dir / f"slurmd-{name}.out",
        )

    # -- down ---------------------------------------------------------------
    def down(self) -> bool:
        """Stop what ``up`` started, and sandbox daemons its state lost track of. Returns
        False when nothing was up."""
        require_root()
        with self.lock():
            state = self.load()
            if state is None:
                stray = self._stop_strays()
                LOG.info("sandbox is not up" if not stray else "sandbox down")
                return stray
            self._down_locked(state)
            self._stop_strays()
            LOG.info("sandbox down")
            return True

    def _stop_strays(self) -> bool:
        shared_fs.take_down(self.instance)  # one no state records, or a stale mount
        stray = running(conf=self.conf_arg)
        if not stray:
            return False
        jobs = procs.descendants(stray)
        LOG.info(f"stopping {len(stray)} sandbox daemon(s) no state recorded (pids "
            f"{', '.join(map(str, sorted(stray)))})")  # fmt: skip
        procs.kill_now(jobs)
        procs.stop(stray, grace=10.0)
        return True

    def _down_locked(self, state: State) -> None:
        procs.stop(helpers_running(state), grace=2.0)
        # Job processes first: they would outlive their slurmd as orphans.
        jobs = procs.holders_of_sockets_under(self.state_dir / "spool")
        jobs |= procs.descendants(jobs)
        daemons = [n["pid"] for n in state.nodes if n.get("pid")]
        daemons = [p for p in daemons if procs.is_process_of(p, "slurmd")]
        procs.kill_now(jobs | procs.descendants(daemons))
        procs.stop(daemons, grace=10.0)
        if state.slurmctld and procs.is_process_of(state.slurmctld, "slurmctld"):
            procs.stop([state.slurmctld, *procs.descendants([state.slurmctld])], grace=10.0)
        shared_fs.take_down(self.instance)  # after the jobs that used it; also when its server died
        with FileLock(str(MOUNTS_LOCK)):
            leave(self.state_dir, self.root, state.munged, lambda o, p: Sandbox(o).adopt_munged(p))
        clean_cgroups([n["name"] for n in state.nodes])
        shutil.rmtree(state.config(self.state_dir, self.hostname).local_root, ignore_errors=True)
        self.state_file.unlink(missing_ok=True)

    def adopt_munged(self, pid: int, timeout: float = 5.0) -> bool:
        """Record a munged another sandbox started and left running for this one; False
        when this one is busy (going down itself) beyond ``timeout``, or not up."""
        try:
            with self.lock().acquire(timeout=timeout):
                state = self.load()
                if state is None or state.munged is not None:
                    return False
                state.munged = pid
                self.save(state)
                return True
        except Timeout:
            return False

    # -- the controller, for outage drills ----------------------------------
    def stop_controller(self) -> None:
        """Stop slurmctld (jobs keep running on their nodes), as in a controller outage."""
        with self.lock():
            state = self.current()
            pid = state.slurmctld
            if pid is None:
                raise SandboxError("the sandbox is not up: run `slurmpre sandbox up`")
            if procs.is_process_of(pid, "slurmctld"):
                procs.stop([pid, *procs.descendants([pid])], grace=10.0)
            state.slurmctld = None
            self.save(state)

    def start_controller(self, timeout: float = 60.0) -> None:
        """Start slurmctld again, recovering its saved state (running jobs included)."""
        with self.lock():
            state = self.current()
            cfg = state.config(self.state_dir, self.hostname)
            state.slurmctld = self._spawn(
                ["slurmctld", "-D", "-f", self.conf_arg],
                cfg.log_dir / "slurmctld.out",
            )
            self.save(state)
        wait_ctld(self.env, cfg.log_dir, timeout)

    # -- helpers recorded for down -----------------------------------------
    def add_helper(self, pid: int) -> None:
        with self.lock():
            state = self.current()
            state.helpers = [*sorted(helpers_running(state)), pid]
            self.save(state)

    def set_node_pid(self, name: str, pid: int | None) -> None:
        with self.lock():
            state = self.current()
            for node in state.nodes:
                if node["name"] == name:
                    node["pid"] = pid
            self.save(state)
