"""The batch script of the last `slurmpre submit`, kept in the job's own folder for the
successors to submit again (``.slurmpre/job.sbatch``): written by the login side, read by
the job's watcher, the user's alone (`slurmpre.folder.trust`)."""

from __future__ import annotations

from slurmpre.errors import SlurmError
from slurmpre.folder import trust
from slurmpre.folder.access import CONTROL_MODE
from slurmpre.folder.layout import FolderLayout
from slurmpre.reading import MEDIUM


def record(layout: FolderLayout, script: str) -> None:
    """Keep the script of a submit, for the successors: the user's own, owner-only."""
    trust.write(layout.script, script, mode=CONTROL_MODE)


def recorded(layout: FolderLayout) -> str:
    """The script of the last submit; a SlurmError when it is missing (a job submitted by
    a slurmpre before successors, or with a bare sbatch) or not the user's own."""
    try:
        return trust.read_text(layout.script, MEDIUM)
    except trust.Untrusted as exc:
        raise SlurmError(f"no successor from {layout.script}: {exc}") from None
    except (OSError, ValueError) as exc:
        raise SlurmError(f"no recorded submit to repeat in {layout.meta}: {exc}") from None
