import pytest
from slurmpre.errors import SlurmError
from slurmpre.slurm.hostlist import expand


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("", []),
        ("(null)", []),
        ("n1", ["n1"]),
        ("n[1-3]", ["n1", "n2", "n3"]),
        ("gpu-preemptible-dp-[1-2]", ["gpu-preemptible-dp-1", "gpu-preemptible-dp-2"]),
        ("n[01-03,7]", ["n01", "n02", "n03", "n7"]),
        ("a[1-2],b1", ["a1", "a2", "b1"]),
        ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
        ("n[8-11]", ["n8", "n9", "n10", "n11"]),
        ("n[008-010]", ["n008", "n009", "n010"]),
    ],
)
def test_expand(expr: str, names: list[str]) -> None:
    assert expand(expr) == names


@pytest.mark.parametrize("bad", ["n[1-3", "n1-3]", "n[3-1]", "n[a-b]"])
def test_expand_rejects_malformed(bad: str) -> None:
    with pytest.raises(SlurmError, match="bad hostlist"):
        expand(bad)
