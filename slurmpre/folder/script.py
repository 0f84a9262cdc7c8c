"""The batch script of the last `slurmpre submit`, kept in the job's own folder for the
successors to submit again (``.slurmpre/job.sbatch``), and the options that submit gave
sbatch on its command line (``job.sbatch-args.json``): written by the login side, read by
the job's watcher, the user's alone (`slurmpre.folder.trust`)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from slurmpre.errors import SlurmError
from slurmpre.folder import trust
from slurmpre.folder.access import CONTROL_MODE
from slurmpre.folder.layout import FolderLayout
from slurmpre.reading import MEDIUM


def record(layout: FolderLayout, script: str, args: Sequence[str] = ()) -> None:
    """Keep the script of a submit and its command line's options, for the successors:
    the user's own, owner-only. The options name the script they were given with."""
    given = {"script_sha256": _digest(script), "args": list(args)}
    trust.write(layout.script_args, json.dumps(given), mode=CONTROL_MODE)
    trust.write(layout.script, script, mode=CONTROL_MODE)


def _digest(script: str) -> str:
    import hashlib  # here: the wrapper loads no more than it needs to launch

    return hashlib.sha256(script.encode()).hexdigest()


def recorded(layout: FolderLayout) -> str:
    """The script of the last submit; a SlurmError when it is missing (a job submitted by
    a slurmpre before successors, or with a bare sbatch) or not the user's own."""
    try:
        return trust.read_text(layout.script, MEDIUM)
    except trust.Untrusted as exc:
        raise SlurmError(f"no successor from {layout.script}: {exc}") from None
    except (OSError, ValueError) as exc:
        raise SlurmError(f"no recorded submit to repeat in {layout.meta}: {exc}") from None


def recorded_args(layout: FolderLayout, script: str) -> list[str]:
    """The options the last submit gave sbatch on its command line with ``script``: []
    when none were recorded with this script (a slurmpre from before them, or one that
    wrote the script alone since), and the script's own lines then hold; a SlurmError when
    they are not the user's own or not options."""
    path = layout.script_args
    try:
        given = json.loads(trust.read_text(path, MEDIUM))
    except FileNotFoundError:
        return []
    except trust.Untrusted as exc:
        raise SlurmError(f"no successor from {path}: {exc}") from None
    except (OSError, ValueError) as exc:
        raise SlurmError(f"no recorded submit to repeat in {layout.meta}: {exc}") from None
    args = given.get("args") if isinstance(given, dict) else None
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise SlurmError(f"no successor from {path}: not a list of sbatch options")
    return args if given.get("script_sha256") == _digest(script) else []
