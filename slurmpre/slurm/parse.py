"""Pure parsers of Slurm's text output, the same on Slurm 22.05, 24.11 and 26.05.

Each takes the text a command printed and returns frozen values; tests feed them
output captured from real clusters (``tests/data/``).
"""

from __future__ import annotations

import re
import shlex
import time
from dataclasses import dataclass

from slurmpre.errors import SlurmError
from slurmpre.slurm.hostlist import expand
from slurmpre.slurm.states import FINISHED, HOLDING_NODES

# A key of `scontrol show ... -o` output: a word at the start or after a space,
# followed by '='. Keys carry letters, digits, '_', ':', '/' (``Socks/Node``).
_KEY = re.compile(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_:/.]*)=")


def parse_record(line: str) -> dict[str, str]:
    """One line of ``scontrol show job|node -o`` -> {key: value}.

    A value ends where the next ``Key=`` begins, so values with spaces (a
    drain reason, ``OS=Linux 6.1 #1 SMP``) survive.
    """
    matches = list(_KEY.finditer(line))
    record: dict[str, str] = {}
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        record[m.group(1)] = line[m.end() : end].strip()
    return record


def _null(value: str | None) -> str | None:
    if value is None or value in ("(null)", "None", "N/A", ""):
        return None
    return value


@dataclass(frozen=True)
class NodeInfo:
    """One node as Slurm reports it."""

    name: str
    state: str  # base state: IDLE, MIXED, ALLOCATED, DOWN, ...
    flags: frozenset[str]  # DRAIN, COMPLETING, NOT_RESPONDING, ...
    reason: str | None
    features: tuple[str, ...]
    address: str | None = None
    reason_time: float | None = None  # when the reason was set (epoch seconds), from its stamp
    cpus: int = 0
    cpus_alloc: int = 0
    gpus: int = 0  # from Gres=gpu:N (every type summed)
    gpus_alloc: int = 0  # from AllocTRES gres/gpu=N

    @property
    def draining(self) -> bool:
        """Drained or draining: Slurm starts nothing new here (the provider's preemption notice)."""
        return "DRAIN" in self.flags or self.state in ("DRAIN", "DRAINING", "DRAINED")

    @property
    def down(self) -> bool:
        return self.state == "DOWN" or "NOT_RESPONDING" in self.flags

    @property
    def usable(self) -> bool:
        return not (self.draining or self.down) and self.state in (
            "IDLE",
            "MIXED",
            "ALLOCATED",
            "COMPLETING",
        )


def split_state(state: str) -> tuple[str, frozenset[str]]:
    """``MIXED+DRAIN`` -> (``MIXED``, {``DRAIN``}); also accepts '*'-suffixed sinfo states."""
    parts = [p for p in state.strip().upper().split("+") if p]
    if not parts:
        raise SlurmError(f"empty node state in Slurm output: {state!r}")
    base = parts[0].rstrip("*~#!%$@^-")
    flags = set(parts[1:])
    if parts[0].endswith("*"):
        flags.add("NOT_RESPONDING")
    return base, frozenset(flags)


_STAMP = re.compile(r"\s*\[[^\]@]*@([^\]]*)\]\s*$")


def _reason(raw: str | None) -> tuple[str | None, float | None]:
    """Split the ``[user@time]`` that scontrol appends to a reason: (text, epoch seconds).

    scontrol prints the time in the local time zone of the process that runs
    it, so it is read back in the same zone. A stamp that does not parse gives
    None: the caller falls back to when it saw the reason.
    """
    raw = _null(raw)
    if raw is None:
        return None, None
    m = _STAMP.search(raw)
    if m is None:
        return raw, None
    text = raw[: m.start()] or None
    try:
        when: float | None = time.mktime(time.strptime(m.group(1).strip(), "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        when = None
    return text, when


def _features(raw: str | None) -> tuple[str, ...]:
    raw = _null(raw)
    return tuple(f for f in (raw or "").split(",") if f)


def _count(raw: str | None) -> int:
    raw = _null(raw)
    return int(raw) if raw is not None and raw.isdigit() else 0


_GRES_GPU = re.compile(r"^gpu(?::[^:(]+)?:(\d+)")


def gres_gpus(raw: str | None) -> int:
    """``gpu:2``, ``gpu:h100:8(S:0-1)``, ``gpu:a100:2,gpu:h100:4`` -> GPUs on the node."""
    total = 0
    for part in re.split(r",(?=gpu)", _null(raw) or ""):
        m = _GRES_GPU.match(part.strip())
        if m:
            total += int(m.group(1))
    return total


def tres(raw: str | None, key: str) -> int:
    """``cpu=2,mem=4G,gres/gpu=2,gres/gpu:h100=2`` -> the untyped ``key``'s count."""
    for item in (_null(raw) or "").split(","):
        name, _, value = item.partition("=")
        if name == key and value.isdigit():
            return int(value)
    return 0


def parse_nodes(text: str) -> list[NodeInfo]:
    """``scontrol show node -o`` -> nodes, in Slurm's order."""
    nodes = []
    for line in text.splitlines():
        if not line.strip() or not line.startswith("NodeName="):
            continue
        rec = parse_record(line)
        base, flags = split_state(rec.get("State", "UNKNOWN"))
        reason, reason_time = _reason(rec.get("Reason"))
        nodes.append(
            NodeInfo(
                name=rec["NodeName"],
                state=base,
                flags=flags,
                reason=reason,
                features=_features(rec.get("AvailableFeatures")),
                address=_null(rec.get("NodeAddr")),
                reason_time=reason_time,
                cpus=_count(rec.get("CPUTot")),
                cpus_alloc=_count(rec.get("CPUAlloc")),
                gpus=gres_gpus(rec.get("Gres")),
                gpus_alloc=tres(rec.get("AllocTRES"), "gres/gpu"),
            )
        )
    return nodes


@dataclass(frozen=True)
class JobInfo:
    """One job as ``scontrol show job -o`` reports it."""

    job_id: str
    name: str
    state: str
    reason: str | None
    restarts: int
    requeue: bool
    nodes: tuple[str, ...]
    num_nodes: str  # "2" or, while pending, a range such as "1-2"
    features: str | None
    batch_host: str | None
    stdout: str | None
    raw: dict[str, str]

    @property
    def user(self) -> str:
        """``UserId=alice(1000)`` -> ``alice``."""
        return self.raw.get("UserId", "").partition("(")[0]

    @property
    def tag(self) -> str:
        """The job as a person names it: ``123``, or ``120_3`` for an array's task (whose
        own JobId Slurm numbers apart); a pending array's remaining tasks keep the id."""
        array, task = self.raw.get("ArrayJobId"), self.raw.get("ArrayTaskId", "")
        return f"{array}_{task}" if array and task.isdigit() else self.job_id

    @property
    def finished(self) -> bool:
        return self.state in FINISHED

    @property
    def holds_nodes(self) -> bool:
        return self.state in HOLDING_NODES


def _job(rec: dict[str, str]) -> JobInfo:
    """A job from scontrol's keys (what squeue does not print is left empty)."""
    restarts = rec.get("Restarts", "0")
    return JobInfo(
        job_id=rec["JobId"],
        name=rec.get("JobName", ""),
        state=rec.get("JobState") or "UNKNOWN",
        reason=_null(rec.get("Reason")),
        restarts=int(restarts) if restarts.isdigit() else 0,
        requeue=rec.get("Requeue", "0") == "1",
        nodes=tuple(expand(_null(rec.get("NodeList")) or "")),
        num_nodes=rec.get("NumNodes", ""),
        features=_null(rec.get("Features")),
        batch_host=_null(rec.get("BatchHost")),
        stdout=_null(rec.get("StdOut")),
        raw=rec,
    )


def parse_jobs(text: str) -> list[JobInfo]:
    """``scontrol show job -o [ID]`` -> jobs (an array job gives one per task)."""
    return [_job(parse_record(line)) for line in text.splitlines() if line.startswith("JobId=")]


# What `squeue` prints of a user's jobs (`SQUEUE_FORMAT`), as scontrol's keys name it;
# the name last, since it may hold the separator.
SQUEUE_FIELDS = (
    ("JobID", "JobId"),
    ("ArrayJobID", "ArrayJobId"),
    ("ArrayTaskID", "ArrayTaskId"),
    ("State", "JobState"),
    ("UserName", "UserId"),
    ("RestartCnt", "Restarts"),
    ("Name", "JobName"),
)
SQUEUE_FORMAT = ",".join(f"{name}:|" for name, _ in SQUEUE_FIELDS)


def parse_squeue(text: str) -> list[JobInfo]:
    """``squeue -h -O SQUEUE_FORMAT`` -> jobs, with what those columns say (the rest
    empty): enough to list a user's jobs without asking for everyone's."""
    out = []
    for line in text.splitlines():
        cells = line.split("|", len(SQUEUE_FIELDS) - 1)
        if len(cells) < len(SQUEUE_FIELDS) or not cells[0].strip():
            continue
        rec = {key: cell.strip() for (_, key), cell in zip(SQUEUE_FIELDS, cells, strict=True)}
        rec["JobName"] = cells[-1].rstrip("|").strip()
        if rec["ArrayJobId"] in ("", "N/A") or rec["ArrayTaskId"] in ("", "N/A"):
            rec.pop("ArrayJobId")
            rec.pop("ArrayTaskId")
        out.append(_job(rec))
    return out


_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def parse_version(text: str) -> tuple[int, int, int]:
    """``slurm-wlm 22.05.8`` / ``slurm 24.11.5`` -> (22, 5, 8)."""
    m = _VERSION.search(text)
    if not m:
        raise SlurmError(f"cannot read a Slurm version from {text.strip()!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def parse_submit(text: str) -> str:
    """``sbatch --parsable`` output (``123`` or ``123;cluster``) -> job id."""
    first = text.strip().splitlines()[-1] if text.strip() else ""
    job_id = first.split(";", 1)[0].strip()
    if not job_id.isdigit():
        raise SlurmError(f"sbatch printed no job id: {text.strip()!r}")
    return job_id


def format_version(version: tuple[int, int, int] | list[int]) -> str:
    """(22, 5, 8) -> ``22.05.8``, as Slurm writes it."""
    major, minor, micro = version
    return f"{major}.{minor:02d}.{micro}"


def parse_config(text: str) -> dict[str, str]:
    """``scontrol show config`` -> {key: value} (``Key = Value`` lines; the rest ignored)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        key = key.strip()
        if sep and key and " " not in key:
            out[key] = value.strip()
    return out


# Slurm's default credential lifetime (auth/munge's cred_expire), in seconds.
DEFAULT_CRED_EXPIRE = 120


def requeue_floor(config: dict[str, str]) -> int:
    """Seconds a requeued job must wait before it can start again: ``cred_expire + 1``.

    slurmctld holds a requeued job back until every credential of its last run
    has expired (``AuthInfo=cred_expire=N``, 120 s unless the site sets it).
    """
    expire = DEFAULT_CRED_EXPIRE
    for part in config.get("AuthInfo", "").split(","):
        key, _, value = part.strip().partition("=")
        if key == "cred_expire" and value.strip().isdigit():
            expire = int(value)
    return expire + 1


def expedited_requeue(config: dict[str, str]) -> bool:
    """Whether the cluster lets a job ask for an expedited requeue (``--requeue=expedite``:
    immediately eligible again, at the top of the queue; Slurm 25.11+, when the
    administrator set ``SlurmctldParameters=enable_expedited_requeue``)."""
    parts = config.get("SlurmctldParameters", "").replace(" ", "").split(",")
    return "enable_expedited_requeue" in parts


_RESIZE_LINE = re.compile(r"^\s*(?:export\s+(?P<key>\w+)=(?P<value>.*)|unset\s+(?P<gone>\w+))\s*$")


def parse_resize_env(text: str) -> dict[str, str | None]:
    """The ``slurm_job_<id>_resize.sh`` that ``scontrol update JobId=… NodeList=…`` writes
    -> the job's new environment: a value per ``export``, None per ``unset``."""
    out: dict[str, str | None] = {}
    for line in text.splitlines():
        m = _RESIZE_LINE.match(line)
        if m is None:
            continue
        if m.group("gone"):
            out[m.group("gone")] = None
            continue
        try:
            words = shlex.split(m.group("value"))
        except ValueError:
            raise SlurmError(f"cannot read the resize script's line {line.strip()!r}") from None
        out[m.group("key")] = words[0] if words else ""
    if "SLURM_JOB_NODELIST" not in out and "SLURM_NODELIST" not in out:
        raise SlurmError("the resize script names no node list")
    return out
