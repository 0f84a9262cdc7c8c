"""Two real Unix users of one group on the sandbox (#35, docs/security.md).

``sp-owner`` submits a job with ``file_access = "group"``; ``sp-mate``, of the same
group, tries what a hostile teammate would while it trains: rewrite the script a
successor submits, move the job's .slurmpre aside, forge a notice, change the code, and
plant a checkpoint of their own, newer than the owner's, for the next attempt to resume
from. Each is refused (the first four by the modes slurmpre sets, the fifth by
slurmpre, which names it); the node is then preempted the provider's way, the owner's
job hands over and finishes, every step trained once, and the teammate reads its
checkpoints and its status all along.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import slurmpre
from slurmpre.sandbox.cluster import Sandbox
from slurmpre.sandbox.instance import sandbox_env
from slurmpre.sandbox.preempt import InBackground, PreemptPlan
from slurmpre.slurm.client import CommandLineSlurm

from tests.conftest import wait_for, wait_preemptible_idle

pytestmark = pytest.mark.sandbox

TEAM, OWNER, MATE = "sp-team", "sp-owner", "sp-mate"
STEPS = 40
SOURCE = Path(slurmpre.__file__).resolve().parents[1]


def _ensure_users(box: Sandbox) -> None:
    if subprocess.run(["getent", "group", TEAM], capture_output=True).returncode != 0:
        subprocess.run(["groupadd", TEAM], check=True)
    for user in (OWNER, MATE):
        if subprocess.run(["id", user], capture_output=True).returncode != 0:
            subprocess.run(["useradd", "-M", "-g", TEAM, "-s", "/bin/sh", user], check=True)
        home = Path("/home") / user
        if home.exists():
            shutil.rmtree(home)
        home.mkdir(mode=0o750)
        shutil.chown(home, user, TEAM)
        home.chmod(0o750)  # the team reaches the owner's checkpoints below it
    if box.root is None:
        return
    for db, names in (("passwd", (OWNER, MATE)), ("group", (TEAM,))):
        path = box.root.path / "etc" / db
        have = {line.split(":")[0] for line in path.read_text().splitlines()}
        for name in names:
            if name not in have:
                line = subprocess.run(["getent", db, name], capture_output=True, text=True,
                                      check=True).stdout  # fmt: skip
                with path.open("a") as fh:
                    fh.write(line)


def _host_python() -> Path:
    """A python every user may run, with slurmpre from this source (the host's Debian
    python: the test venv's lives under /root): a venv of it, and a .pth naming the source."""
    venv = Path("/var/lib/slurmpre/team-venv")
    python = venv / "bin" / "python"
    need = ["python3-jinja2", "python3-click", "python3-filelock"]
    missing = subprocess.run(["/usr/bin/python3", "-c", "import jinja2, click, filelock"],
                             capture_output=True).returncode  # fmt: skip
    if missing:
        apt = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *need]
        subprocess.run(install, check=True, env=apt)
    if not python.exists():
        subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip",
                        "--system-site-packages", str(venv)], check=True)  # fmt: skip
    where = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = subprocess.run([str(python), "-c", where], capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip
    (Path(site) / "slurmpre-source.pth").write_text(f"{SOURCE}\n")
    return python


@pytest.fixture(scope="module")
def team(sandbox: Sandbox) -> dict[str, Any]:
    _ensure_users(sandbox)
    python = (
        Path("/usr/bin/python3")  # inside the root, where these commands run
        if sandbox.root is not None
        else _host_python()
    )
    return {"box": sandbox, "python": str(python)}


def as_user(team: dict[str, Any], user: str, argv: Sequence[str], **kw: Any) -> Any:
    """``argv`` run as ``user`` of the team, where that user would run it: on the host, or
    inside the Debian root of the sandbox's release."""
    box: Sandbox = team["box"]
    # This worker's sandbox (its SLURM_CONF), as the user's shell would name it.
    env = {"HOME": f"/home/{user}", "USER": user, "LANG": "C.UTF-8",
           "PATH": box.env["PATH"] if box.root is None else "/usr/bin:/bin",
           **sandbox_env(box.instance)}  # fmt: skip
    if box.root is None:
        cmd = ["setpriv", f"--reuid={user}", f"--regid={TEAM}", "--init-groups", "--"]
    else:
        cmd = ["chroot", f"--userspec={user}:{TEAM}", str(box.root.path)]
    cwd = kw.pop("cwd", f"/home/{user}")
    wrapped = [
        "/bin/sh",
        "-c",
        'cd "$0" && exec "$@"',
        cwd,
        "env",
        "-i",  # only these: not the test session's own (its XDG_STATE_HOME is root's)
        *[f"{k}={v}" for k, v in env.items()],
        *argv,
    ]
    return subprocess.run([*cmd, *wrapped], capture_output=True, text=True, check=False, **kw)


def slurmpre_as(team: dict[str, Any], user: str, *args: str, cwd: str | None = None) -> Any:
    return as_user(team, user, [team["python"], "-m", "slurmpre", *args],
                   cwd=cwd or f"/home/{user}")  # fmt: skip


def progress(folder: Path) -> list[dict[str, Any]]:
    path = folder / "progress.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_teammate_cannot_steer_the_owners_job_and_still_reads_its_checkpoints(
    team: dict[str, Any], slurm: CommandLineSlurm
) -> None:
    box: Sandbox = team["box"]
    wait_preemptible_idle(slurm)
    proj = Path("/home") / OWNER / "proj"
    proj.mkdir(mode=0o750)
    shutil.copy(Path(__file__).with_name("team_train.py"), proj / "train.py")
    folder = Path("/home") / OWNER / "checkpoints" / "team"
    snapshot = shutil.which("git") is not None and box.root is None
    spec = proj / "team.toml"
    spec.write_text("\n".join([
        'name = "team"',
        f'command = [{json.dumps(team["python"])}, "train.py"]',
        f'python = {json.dumps(team["python"])}',
        f"checkpoint_dir = {json.dumps(str(folder))}",
        'file_access = "group"', 'launcher = "plain"', "poll_interval = 1",
        f'snapshot = "{"git" if snapshot else "none"}"',
        "[env]", f'TEAM_STEPS = "{STEPS}"',
    ]) + "\n")  # fmt: skip
    for path in proj.rglob("*"):
        shutil.chown(path, OWNER, TEAM)
    shutil.chown(proj, OWNER, TEAM)
    if snapshot:
        for git in (["init", "-q"], ["add", "-A"], ["-c", "user.name=o", "-c", "user.email=o@o",
                    "commit", "-q", "-m", "one"]):  # fmt: skip
            done = as_user(team, OWNER, ["git", *git], cwd=str(proj))
            assert done.returncode == 0, done.stderr
    submitted = slurmpre_as(team, OWNER, "submit", str(spec), cwd=str(proj))
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.split()[0]
    wait_for("the owner's job to train 5 steps",
             lambda: any(p.get("step", 0) >= 5 for p in progress(folder)), timeout=180)  # fmt: skip
    meta = folder / ".slurmpre"

    def mate(*argv: str) -> Any:
        return as_user(team, MATE, list(argv))

    # Redirect: the script a successor submits, and the job's own folder.
    tried = mate("/bin/sh", "-c", f"echo 'sbatch evil' > {meta}/job.sbatch")
    assert tried.returncode != 0 and "Permission denied" in tried.stderr
    tried = mate("mv", str(meta), str(folder / "moved"))
    assert tried.returncode != 0 and "not permitted" in tried.stderr  # sticky: the owner's
    # Stop: a notice of the mate's own where the watcher's goes.
    tried = mate("/bin/sh", "-c", f"echo '{{}}' > {meta}/notice-{job}-0.json")
    assert tried.returncode != 0 and "Permission denied" in tried.stderr
    # Re-code: the code the next attempt runs (the snapshot, or the owner's folder).
    code = next((meta / "code").glob("*/train.py")) if snapshot else proj / "train.py"
    tried = mate("/bin/sh", "-c", f"echo 'import os; os.abort()' >> {code}")
    assert tried.returncode != 0 and "Permission denied" in tried.stderr
    # Plant a checkpoint of the mate's own, newer than the owner's: allowed (the group
    # writes checkpoints), and never resumed from.
    planted = folder / "step-99999999"
    state = json.dumps({"step": STEPS})
    marker = json.dumps({"step": 99999999, "committed_at": 1.0,
                         "files": {"state.json": len(state)}})  # fmt: skip
    tried = mate("/bin/sh", "-c", f"mkdir {planted} && printf %s '{state}' > {planted}/"
                 f"state.json && printf %s '{marker}' > {planted}/.slurmpre-complete")  # fmt: skip
    assert tried.returncode == 0, tried.stderr
    # Meanwhile the mate reads the owner's checkpoints and status.
    seen = mate("/bin/sh", "-c", f"cat {folder}/step-00000005/state.json")
    assert seen.returncode == 0 and json.loads(seen.stdout) == {"step": 5}, seen.stderr
    status = slurmpre_as(team, MATE, "status", job, "--checkpoint-dir", str(folder))
    assert status.returncode == 0 and "team" in status.stdout, status.stderr

    # The provider's preemption of the owner's node: the job hands over and goes on.
    node = slurm.job(job).nodes[0]
    preempt = InBackground(box, PreemptPlan(node, window=30, return_after=2, once_empty=True))
    preempt.start()
    try:
        wait_for("the owner's run to finish", lambda: any(
            p["event"] == "done" for p in progress(folder)), timeout=300)  # fmt: skip
    finally:
        preempt.finish()
    rows = progress(folder)
    begins = [p for p in rows if p["event"] == "begin"]
    assert len(begins) == 2, rows  # the first attempt, and its successor
    stop = next(p["step"] for p in rows if p["event"] == "stop")
    assert begins[1]["resumed"] == stop and begins[1]["resume_path"].endswith(
        f"step-{stop:08d}"
    )  # the owner's checkpoint, not the planted one
    steps = [p["step"] for p in rows if p["event"] == "step"]
    assert steps == list(range(1, STEPS + 1)), steps  # every step once
    log = next(folder.joinpath("logs").glob("team-*.attempt-0.out"), None)
    logs = "".join(p.read_text() for p in folder.joinpath("logs").glob("*.out"))
    assert log is not None and "step-99999999" in logs and "not resumed from" in logs, logs
    final = mate("/bin/sh", "-c", f"cat {folder}/step-{STEPS:08d}/state.json")
    assert final.returncode == 0 and json.loads(final.stdout) == {"step": STEPS}
