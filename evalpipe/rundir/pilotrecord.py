"""The manifest's `pilot`: what a pilot drew (its size as given, its seed, per task the sample
ids of how many), its batch probe's decode steps (run/pilotprobe.py), and how many of its
samples the full run after it resumed."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from evalpipe.rundir.stepprofile import StepProfile


@dataclass(frozen=True, kw_only=True)
class PilotTask:
    ids: tuple[str, ...]  # the samples drawn
    of: int  # the samples the full run owes for the task


@dataclass(frozen=True, kw_only=True)
class Probe:
    """A pilot's batch probe (run/pilotprobe.py): its decode steps at the full run's batch, and
    the prompt tokens it prefilled first and the seconds that took."""

    steps: StepProfile
    prompt_tokens: int
    prefill_s: float

    def to_dict(self) -> dict[str, Any]:
        return {"steps": self.steps.to_dict(), "prompt_tokens": self.prompt_tokens,
                "prefill_s": round(self.prefill_s, 6)}  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Probe:
        return cls(steps=StepProfile.from_dict(data.get("steps")),
                   prompt_tokens=int(data.get("prompt_tokens", 0)),
                   prefill_s=float(data.get("prefill_s", 0.0)))  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class PilotRecord:
    size: str  # --pilot as given: "auto", a fraction or a count
    seed: int
    tasks: dict[str, PilotTask]
    resumed: int | None = None  # set by the full run's first attempt
    # The full run's batch, probed after the pilot's samples (None: not probed, the pilot's own
    # batches reaching the run's).
    probe: Probe | None = None

    @property
    def keys(self) -> set[tuple[str, str]]:
        """(task, sample id) of every sample drawn."""
        return {(task, i) for task, entry in self.tasks.items() for i in entry.ids}

    def drawn(self, task: str) -> int:
        entry = self.tasks.get(task)
        return len(entry.ids) if entry else 0

    def with_resumed(self, count: int) -> PilotRecord:
        return replace(self, resumed=count)

    def with_probe(self, probe: Probe) -> PilotRecord:
        return replace(self, probe=probe)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "size": self.size,
            "seed": self.seed,
            "tasks": {
                task: {"drawn": len(e.ids), "of": e.of, "ids": list(e.ids)}
                for task, e in self.tasks.items()
            },
        }
        if self.resumed is not None:
            out["resumed"] = self.resumed
        if self.probe is not None:
            out["probe"] = self.probe.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PilotRecord:
        return cls(
            size=str(data["size"]),
            seed=int(data["seed"]),
            tasks={
                str(task): PilotTask(ids=tuple(str(i) for i in e["ids"]), of=int(e["of"]))
                for task, e in data["tasks"].items()
            },
            resumed=None if data.get("resumed") is None else int(data["resumed"]),
            probe=None if data.get("probe") is None else Probe.from_dict(data["probe"]),
        )
