from pathlib import Path

import pytest
from slurmpre.errors import UsageError
from slurmpre.sandbox.config import (
    MARKER,
    STOCK,
    SandboxConfig,
    node_specs,
    render_cgroup_conf,
    render_gres_conf,
    render_slurm_conf,
)


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
    assert "TaskPlugin=task/none" in lines
    assert "AuthInfo=cred_expire=5" in lines
    assert "JobRequeue=0" in lines
    assert "SlurmdSpoolDir=/var/lib/slurmpre/sandbox/spool/%n" in lines
    node = next(ln for ln in lines if ln.startswith("NodeName=gpu-preemptible-dp-2"))
    assert "Features=preemptible" in node and "Gres=gpu:2" in node and "NodeAddr=127.0.0.1" in node
    assert render_cgroup_conf(cfg()) is None


def test_slurm_conf_24_11_has_no_none_plugins_and_disables_cgroups() -> None:
    c = cfg((24, 11, 5))
    assert "TaskPlugin" not in render_slurm_conf(c)
    cgroup = render_cgroup_conf(c)
    assert cgroup is not None and "CgroupPlugin=disabled" in cgroup


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
