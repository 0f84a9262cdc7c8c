"""Every name slurmpre gives a file, in one place (submitit's ``JobPaths`` is the model).

Under a checkpoint folder (`FolderLayout`)::

    step-00000010/                  a committed checkpoint, sealed by .slurmpre-complete
    .incoming-step-00000010-<tag>/  one being written (hidden: never resolved)
    .sync.incoming-step-...-<tag>/  its ranks' done/abort marks and rank 0's verdict
    .partial-step-... .duplicate-step-... .pruned-...   set aside, never deleted in place
    .slurmpre/attempts.jsonl        the ledger (records.py), under ledger.lock
    .slurmpre/writing.lock          held from a checkpoint's first byte to its commit
    .slurmpre/choice-<job>-<attempt>.json       node 0's checkpoint choice
    .slurmpre/notice-<job>-<attempt>.json       a preemption notice, for every rank
    .slurmpre/listening-<job>-<attempt>         the script asks preemption_requested()
    .slurmpre/taken-<job>-<attempt>             ... and it answered True
    .slurmpre/in-place-<job>-<attempt>.json     a request to restart inside the allocation
    .slurmpre/spares-<job>-<attempt>.json       drained spares to release while it trains
    .slurmpre/job.sbatch            the batch script of the last submit, for a successor
    .slurmpre/job.sbatch-args.json  ... and the options it gave sbatch on its command line
    .slurmpre/code/<hash>/          the code snapshot every attempt runs (snapshot = "git")

``.slurmpre`` and what a job acts on in it are its owner's alone (`slurmpre.folder.trust`).

In the log folder (`LogLayout`): ``<name>-<job>.out``, appended across restarts (Slurm
writes it), and ``<name>-<job>.attempt-<n>.out``, one per attempt (the batch script
writes it). ``<attempt>`` is an `attempt_key`; ``<job>`` is the job id, or
``<array job>_<task>`` for an array task.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

META = ".slurmpre"
MARKER = ".slurmpre-complete"
PRUNED = ".pruned-"
STEP_WIDTH = 8  # step-NNNNNNNN: below 10^8 the names sort by step as strings

# Hidden folders slurmpre itself leaves in a checkpoint folder: in-flight (with the
# attempt tag that wrote them), their sync marks, stale tries, partial and duplicate
# steps set aside, and what `ckpt prune` renamed but did not get to delete.
LEFTOVER = re.compile(
    r"^\.(?:sync)?\.?incoming-step-(?P<step>\d+)-(?P<tag>[A-Za-z0-9_.-]+?)(?:\.stale-\d+)?$"
    r"|^\.(?:partial|duplicate)-step-\d+-\d+$"
    rf"|^{re.escape(PRUNED)}.+$"
)
STALE = ".stale-"


def step_dir_name(step: int) -> str:
    """slurmpre's own name for the checkpoint of ``step``."""
    return f"step-{step:0{STEP_WIDTH}d}"


def attempt_key(attempt: int, in_place: int = 0) -> str:
    """An attempt's name in file names and logs: ``3``, or ``3.1`` after one in-place restart."""
    return f"{attempt}.{in_place}" if in_place else str(attempt)


def file_tag(tag: str) -> str:
    """``tag`` with every character a file name should not hold replaced by ``_``."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", tag)


@dataclass(frozen=True)
class FolderLayout:
    """The names slurmpre uses under one checkpoint folder."""

    folder: Path

    @property
    def meta(self) -> Path:
        return self.folder / META

    @property
    def ledger(self) -> Path:
        return self.meta / "attempts.jsonl"

    @property
    def ledger_lock(self) -> Path:
        return self.meta / "ledger.lock"

    @property
    def writing_lock(self) -> Path:
        return self.meta / "writing.lock"

    @property
    def tier_key(self) -> Path:
        """The run's secret for pulling checkpoints from its nodes (0600, the owner's)."""
        return self.meta / "tier.key"

    def choice(self, job: str, attempt: str) -> Path:
        return self.meta / f"choice-{job}-{attempt}.json"

    def resume(self, job: str, attempt: str) -> Path:
        """A successor's choice of checkpoint, published once its predecessor has ended
        (its training starts before that, and waits in `slurmpre.resume_path()`)."""
        return self.meta / f"resume-{job}-{attempt}.json"

    def notice(self, job: str, attempt: str | int) -> Path:
        return self.meta / f"notice-{job}-{attempt}.json"

    def listening(self, job: str, attempt: str | int) -> Path:
        return self.meta / f"listening-{job}-{attempt}"

    def taken(self, job: str, attempt: str | int) -> Path:
        return self.meta / f"taken-{job}-{attempt}"

    def goes_on(self, job: str, attempt: str | int) -> Path:
        """Exists once the script has asked `checkpoint_requested()`: it can take its
        notice checkpoint and go on training until it is told to stop."""
        return self.meta / f"goes-on-{job}-{attempt}"

    def meets_at_resume(self, job: str) -> Path:
        """Exists once the job's script has asked `resume_path()` (or `resume_step()`): a
        successor of it may start its training early and meet it there."""
        return self.meta / f"meets-at-resume-{job}"

    def listening_files(self) -> list[Path]:
        """Every attempt's mark that its script asked `preemption_requested()` (names only:
        `slurmpre.folder.trust.marked` says which are the user's own)."""
        return sorted(self.meta.glob("listening-*"))

    def in_place_request(self, job: str, attempt: str | int) -> Path:
        return self.meta / f"in-place-{job}-{attempt}.json"

    def spare_release(self, job: str, attempt: str | int) -> Path:
        return self.meta / f"spares-{job}-{attempt}.json"

    @property
    def script(self) -> Path:
        return self.meta / "job.sbatch"

    @property
    def script_args(self) -> Path:
        return self.meta / "job.sbatch-args.json"

    def step(self, step: int) -> Path:
        return self.folder / step_dir_name(step)

    def incoming(self, step: int, attempt_tag: str) -> Path:
        """Where a checkpoint is written before it is committed: hidden, so never resolved."""
        return self.folder / f".incoming-{step_dir_name(step)}-{file_tag(attempt_tag)}"

    @staticmethod
    def sync(incoming: Path) -> Path:
        """Beside an in-flight checkpoint: each rank's marks, and rank 0's verdict."""
        return incoming.with_name(f".sync{incoming.name}")

    @staticmethod
    def stale(incoming: Path, stamp_ns: int) -> Path:
        return incoming.with_name(f"{incoming.name}{STALE}{stamp_ns}")

    def aside(self, why: str, name: str, stamp: float) -> Path:
        """Where an entry is set aside: ``why`` is "partial" or "duplicate"."""
        return self.folder / f".{why}-{name}-{int(stamp * 1000)}"

    @staticmethod
    def pruned(path: Path, stamp_ns: int) -> Path:
        """What `ckpt prune` renames an entry to before deleting it (beside it)."""
        return path.with_name(f"{PRUNED}{path.name}-{stamp_ns}")

    @staticmethod
    def unpruned(path: Path) -> Path:
        """The name an entry had before `ckpt prune` set it aside (``path`` if it did not)."""
        head, _, stamp = path.name[len(PRUNED) :].rpartition("-")
        if path.name.startswith(PRUNED) and head and stamp.isdigit():
            return path.with_name(head)
        return path


@dataclass(frozen=True)
class AttemptFiles:
    """One attempt's control files: what its watcher and its training script tell each
    other. The wrapper has them from its job (`JobEnv.files`), the script from its
    environment (`slurmpre.api.attempt.own_files`); `FolderLayout` spells their names."""

    layout: FolderLayout
    job: str  # the job's tag
    attempt: str  # an `attempt_key`

    @property
    def notice(self) -> Path:
        """The watcher's notice, which every rank reads."""
        return self.layout.notice(self.job, self.attempt)

    @property
    def listening(self) -> Path:
        """Exists once the script has asked `preemption_requested()`."""
        return self.layout.listening(self.job, self.attempt)

    @property
    def taken(self) -> Path:
        """Exists once `preemption_requested()` has answered True: the script stops."""
        return self.layout.taken(self.job, self.attempt)

    @property
    def goes_on(self) -> Path:
        """Exists once the script has asked `checkpoint_requested()`."""
        return self.layout.goes_on(self.job, self.attempt)

    @property
    def meets_at_resume(self) -> Path:
        """The job's (every attempt's) mark: see `FolderLayout.meets_at_resume`."""
        return self.layout.meets_at_resume(self.job)


@dataclass(frozen=True)
class LogLayout:
    """The names of a job's logs in its log folder."""

    log_dir: Path
    name: str

    JOB = "{name}-{job}.out"
    ATTEMPT = "{name}-{job}.attempt-{attempt}.out"

    def job_log(self, job: str) -> Path:
        return self.log_dir / self.JOB.format(name=self.name, job=job)

    def attempt_log(self, job: str, attempt: str | int) -> Path:
        return self.log_dir / self.ATTEMPT.format(name=self.name, job=job, attempt=attempt)
