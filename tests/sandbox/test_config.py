from pathlib import Path

import pytest
from slurmpre.errors import UsageError
from slurmpre.sandbox.config import (
    MARKER,
    PGID,
    STOCK,
    SandboxConfig,
    Topology,
    node_specs,
    parse_topology,
    render_cgroup_conf,
    render_gres_conf,
    render_slurm_conf,
)
from slurmpre.sandbox.tracking import cgroup_v1_controllers


def cfg(version: tuple[int, int, int] = (22, 5, 8), **kw: object) -> SandboxConfig:
    return SandboxConfig(
        hostname="vm",
        state_dir=Path("/var/lib/slurmpre/sandbox"),
        version=version,
        nodes=node_specs(3, 2),
        **kw,  # type: ignore[arg-type]
    )


def test_default_shape_is_named_like_the_provider() -> None:
    specs = node_specs(3, 2)
    assert [(s.name, s.preemptible) for s in specs] == [
        ("gpu-preemptible-dp-1", True),
        ("gpu-preemptible-dp-2", True),
        ("gpu-dp-1", False),
    ]
    assert len({s.port for s in specs}) == 3


@pytest.mark.parametrize(
    ("total", "pre", "message"),
    [
        (0, 0, "--nodes must be at least 1, got 0"),
        (3, 4, "--preemptible 4 is larger than --nodes 3"),
        (3, -1, "--preemptible must be 0 or more, got -1"),
        (65, 1, "--nodes 65 is more than"),
    ],
)
def test_bad_shapes(total: int, pre: int, message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        node_specs(total, pre)


def test_slurm_conf_22_05() -> None:
    text = render_slurm_conf(cfg())
    assert text.startswith(MARKER)
    lines = text.splitlines()
    assert "SlurmctldHost=vm" in lines
    assert "ProctrackType=proctrack/cgroup" in lines
    assert "TaskPlugin=task/affinity,task/cgroup" in lines
    assert "AuthInfo=cred_expire=5" in lines
    assert "JobRequeue=0" in lines
    assert "SlurmdSpoolDir=/var/lib/slurmpre/sandbox/spool/%n" in lines
    node = next(ln for ln in lines if ln.startswith("NodeName=gpu-preemptible-dp-2"))
    assert "Features=preemptible" in node and "Gres=gpu:2" in node and "NodeAddr=127.0.0.1" in node
    assert "CPUs=2 Sockets=1 CoresPerSocket=2 ThreadsPerCore=1" in node
    cgroup = render_cgroup_conf(cfg())
    assert cgroup is not None
    assert "CgroupPlugin=cgroup/v1" in cgroup and "ConstrainCores=yes" in cgroup


def test_pgid_tracking_still_binds_cpus() -> None:
    lines = render_slurm_conf(cfg(tracking=PGID)).splitlines()
    assert "ProctrackType=proctrack/pgid" in lines
    assert "TaskPlugin=task/affinity" in lines
    assert render_cgroup_conf(cfg(tracking=PGID)) is None


def test_slurm_conf_24_11_has_no_none_plugins_and_disables_cgroups_under_pgid() -> None:
    c = cfg((24, 11, 5), tracking=PGID)
    assert "none" not in render_slurm_conf(c)
    cgroup = render_cgroup_conf(c)
    assert cgroup is not None and "CgroupPlugin=disabled" in cgroup


def test_topology_is_read_from_slurmd_c() -> None:
    text = (
        "NodeName=vm CPUs=64 Boards=1 SocketsPerBoard=2 CoresPerSocket=16 ThreadsPerCore=2 "
        "RealMemory=24105\nUpTime=0-00:03:41\n"
    )
    assert parse_topology(text) == Topology(2, 16, 2)
    assert parse_topology(text).cpus == 64
    with pytest.raises(UsageError, match="cannot read the CPU topology"):
        parse_topology("slurmd: error: oops")


@pytest.mark.parametrize(
    ("mounts", "found"),
    [
        (
            "cgroup /sys/fs/cgroup/freezer cgroup rw,relatime,freezer 0 0\n"
            "cgroup /sys/fs/cgroup/cpuset cgroup rw,relatime,cpuset 0 0\n"
            "cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n",
            {"rw", "relatime", "freezer", "cpuset"},
        ),
        ("cgroup2 /sys/fs/cgroup cgroup2 rw,nsdelegate 0 0\n", set()),
    ],
)
def test_cgroup_v1_controllers_from_proc_mounts(mounts: str, found: set[str]) -> None:
    assert cgroup_v1_controllers(mounts) == found


def test_stock_timings_keep_slurm_defaults() -> None:
    text = render_slurm_conf(cfg(timings=STOCK))
    assert "cred_expire" not in text
    assert "SchedulerParameters" not in text
    assert "SlurmdTimeout=300" in text


def test_gres_conf_points_at_stand_in_devices() -> None:
    text = render_gres_conf(cfg())
    assert "NodeName=gpu-dp-1 Name=gpu File=/var/lib/slurmpre/sandbox/dev/gpu-dp-1-gpu[0-1]" in text


def test_unknown_node_is_named() -> None:
    with pytest.raises(UsageError, match="unknown sandbox node 'nope' \\(nodes: gpu-preemptible"):
        cfg().node("nope")


def test_rate_limiting_is_offered_from_23_02_as_rl_enable() -> None:
    from slurmpre.sandbox.config import rate_limit_parameters

    assert rate_limit_parameters("on", (26, 5, 5)) == "rl_enable"
    assert rate_limit_parameters("10/1", (24, 11, 5)) == (
        "rl_enable,rl_bucket_size=10,rl_refill_rate=1"
    )
    conf = render_slurm_conf(cfg((26, 5, 5), rate_limit="rl_enable"))
    assert "SlurmctldParameters=rl_enable\n" in conf
    assert "SlurmctldParameters" not in render_slurm_conf(cfg((26, 5, 5)))
    with pytest.raises(UsageError, match=r"rl_enable came in 23\.02"):
        rate_limit_parameters("on", (22, 5, 8))
    with pytest.raises(UsageError, match="give on, or BUCKET/REFILL"):
        rate_limit_parameters("10/0", (26, 5, 5))
