"""The drill's options (what the command line gives), and its result (what it prints,
as text or JSON, and what makes it fail)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from slurmpre.drill import report, timeline, verdict
from slurmpre.drill.plan import Moment
from slurmpre.errors import UsageError
from slurmpre.slurm import states

MIN_MBPS = 0.5  # the slowest shared dir the big-state scene asks for (MB/s)
BIG_STATE = "big-state"  # the big-state scene's run (`drill.big_state`)


@dataclass(frozen=True)
class DrillOptions:
    # The provider's proportions: a window of minutes (here one), a checkpoint interval
    # longer than the window (its recipe saves every 500 steps), Slurm's own timings.
    preemptions: int = 3
    window: float = 60.0
    seed: int | None = None
    baseline: bool = False
    stock_timings: bool = True
    steps: int | None = None  # None: enough for every preemption (`training_steps`)
    every: int = 500
    step_seconds: float = 0.15
    save_seconds: float = 1.0
    return_after: float = 10.0
    capacity: bool = True  # the capacity scene: a node of a "1-2" job comes back later
    # The big-state scene's state, MB (0: no such scene): saved on the node, its folder on
    # a shared dir too slow to take it within the window (`drill.big_state`).
    big_state_mb: int = 512
    workdir: Path = Path("/var/lib/slurmpre/drill")
    prices: report.Prices = field(default_factory=report.Prices)

    def check(self) -> None:
        if not 0 <= self.preemptions <= 100:
            raise UsageError(f"--preemptions must be from 0 to 100, got {self.preemptions}")
        if not 5 <= self.window <= 3600:
            raise UsageError(f"--window must be from 5 to 3600 seconds, got {self.window:g}")
        if self.steps is not None and not 20 <= self.steps <= 100_000:
            raise UsageError(f"--steps must be from 20 to 100000, got {self.steps}")
        if not 5 <= self.every <= 10_000:
            raise UsageError(f"--checkpoint-interval must be from 5 to 10000, got {self.every}")
        if self.big_state_mb != 0 and not 16 <= self.big_state_mb <= 8000:
            raise UsageError(
                f"--big-state-mb must be 0 (no such scene) or from 16 to 8000, "
                f"got {self.big_state_mb}"
            )
        if self.big_state_mb and self.big_state_mbps() < MIN_MBPS:
            raise UsageError(
                f"--big-state-mb {self.big_state_mb} in a {self.window:g} s window caps the "
                f"shared dir at {self.big_state_mbps():.3g} MB/s, under {MIN_MBPS:g}: give a "
                "bigger state or a shorter window"
            )

    def big_state_mbps(self) -> float:
        """The big-state scene's cap on its shared dir: writing the state into its folder
        takes one and a half windows (`drill.big_state`)."""
        return self.big_state_mb / (1.5 * self.window)

    def training_steps(self) -> int:
        """Long enough that every preemption comes before the run ends, and no longer.

        An attempt's moment comes within one periodic interval of where it resumed (a
        mid-checkpoint moment waits for the next periodic save). slurmpre resumes
        where it stopped; the seeds' recipe trains on through the window and keeps
        what its last periodic save holds: at most ``kept`` steps an attempt. So the
        last moment comes by ``(N-1) * kept + every`` steps.
        """
        if self.steps is not None:
            return self.steps
        through = round(self.window / self.step_seconds) if self.baseline else 0
        kept = self.every * ((self.every + through) // self.every)
        return max(200, (self.preemptions - 1) * kept + self.every + 1)


@dataclass
class DrillResult:
    seed: int
    options: DrillOptions
    timings: str
    schedule: list[Moment]
    runs: dict[str, timeline.Observed]
    identical: dict[str, bool]
    workdir: Path
    slurm: str | None = None  # the sandbox's Slurm release (None: a run recorded before it was)

    def save(self) -> Path:
        """Everything the report needs, to ``timelines.json`` in the run's folder."""
        about = {
            "seed": self.seed,
            "timings": self.timings,
            "slurm": self.slurm,
            "schedule": [asdict(m) for m in self.schedule],
            "identical_weights": self.identical,
            "options": {k: v for k, v in asdict(self.options).items() if k != "workdir"},
        }
        return timeline.save(self.workdir, self.runs, about)

    @classmethod
    def load(cls, path: Path) -> DrillResult:
        """A run's result from its ``timelines.json``: its report, computed again."""
        runs, about = timeline.load(path)
        try:
            given = dict(about["options"])
            prices = report.Prices(**given.pop("prices"))
            opts = DrillOptions(**given, prices=prices, workdir=path.parent)
            schedule = [Moment(**m) for m in about["schedule"]]
            return cls(about["seed"], opts, about["timings"], schedule, runs,
                       dict(about["identical_weights"]), path.parent,
                       about.get("slurm"))  # fmt: skip
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(f"{path} is not a drill's timelines.json: {exc!r}") from None

    def failures(self) -> list[str]:
        """Where slurmpre fell short in this run (empty: it kept its promise). Only that:
        a figure the report lacks is the report's bug, and a preemption the drill could
        not make is the drill's (both said in its text, neither held against slurmpre)."""
        out = []
        run = self.runs["slurmpre"]
        summary = report.summarize(run, self.runs.get("reference"), prices=self.options.prices)
        if run.state != states.COMPLETED:
            out.append(f"the slurmpre job ended {run.state}")
        if not self.identical.get("slurmpre"):
            out.append("its final weights differ from the uninterrupted run's")
        out += self._capacity_failures()
        out += self._big_state_failures()
        if summary.steps_lost:
            out.append(f"it lost {summary.steps_lost} steps")
        if summary.partial_checkpoint_loaded:
            out.append("an attempt resumed from a partial checkpoint")
        seeds = self.runs.get("seeds")
        if seeds is not None and self.timings == "stock":
            # On Slurm's own timings, what users have, slurmpre must lead the recipe; the
            # sandbox's tuned timings shrink the requeue floor, and the table only shows it.
            theirs = report.summarize(seeds, self.runs.get("reference"), prices=self.options.prices)
            out += verdict.behind(theirs, summary)
        return out

    def _scene_end(self, name: str, final: str) -> list[str]:
        """A scene's job completed, and with the uninterrupted run's bits (``final``)."""
        run = self.runs[name]
        out = [] if run.state == states.COMPLETED else [f"the {name} scene's job ended {run.state}"]
        if not self.identical.get(name):
            out.append(f"the {name} scene's final {final} from the uninterrupted run's")
        return out

    def _capacity_failures(self) -> list[str]:
        """The capacity scene: it grew back, lost nothing, and ended the same bits."""
        run = self.runs.get("capacity")
        if run is None:
            return []
        out = self._scene_end("capacity", "weights differ")
        grows = [r for r in run.resizes() if r.kind == "grow"]
        if not grows:
            out.append("the capacity scene's job did not grow back when its node returned")
        lost = report.summarize(run, self.runs.get("reference"), prices=self.options.prices)
        if lost.steps_lost:
            out.append(f"the capacity scene lost {lost.steps_lost} steps")
        return out

    def _big_state_failures(self) -> list[str]:
        """The big-state scene (`drill.big_state`): it ran to its end, lost no step, took
        the notice save from the drained node's memory, and ended with the same state."""
        run = self.runs.get(BIG_STATE)
        if run is None:
            return []
        out = self._scene_end(BIG_STATE, "state differs")
        pre = report.preemptions(run)
        if not pre:
            out.append("the big-state scene made no preemption (its training ended first)")
        if any(p.steps_lost for p in pre):
            out.append(f"the big-state scene lost {sum(p.steps_lost or 0 for p in pre)} steps")
        if any(p.pull_s is None for p in pre):
            out.append("the big-state scene's notice save was not pulled from the drained node")
        return out

    def _capacity_dict(self) -> dict[str, Any]:
        run = self.runs.get("capacity")
        if run is None:
            return {}
        back = None if run.returned is None else {"node": run.returned[0], "at": run.returned[1]}
        return {"capacity": {"returned": back, "resizes": [asdict(r) for r in run.resizes()]}}

    def as_dict(self) -> dict[str, Any]:
        ref = self.runs.get("reference")
        return {
            "seed": self.seed,
            "timings": self.timings,
            "slurm": self.slurm,
            "window_s": self.options.window,
            "return_after_s": self.options.return_after,
            "steps": self.options.training_steps(),
            "checkpoint_every": self.options.every,
            "prices": asdict(self.options.prices),
            "schedule": [{"moment": m.kind, "after": m.after} for m in self.schedule],
            "identical_weights": self.identical,
            "runs": {
                name: report.as_dict(run, ref, self.options.prices)
                for name, run in self.runs.items()
            },
            **self._capacity_dict(),
            "failures": self.failures(),
            "workdir": str(self.workdir),
        }
