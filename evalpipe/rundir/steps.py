"""steps.jsonl: the checkpoint of episodes, one line per resolved step (the model's text and
its environment's outcome), appended as each resolves; a resume continues each episode after
its last step recorded here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalpipe.records.episode import Step
from evalpipe.rundir.jsonlog import read_jsonl


@dataclass(frozen=True, kw_only=True)
class StepRecord:
    """One resolved step of one episode (a sample of an episodic task)."""

    task: str
    sample_id: str
    step: Step

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.task, "sample_id": self.sample_id, **self.step.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepRecord:
        return cls(task=str(data["task"]), sample_id=str(data["sample_id"]),
                   step=Step.from_dict(data))  # fmt: skip


def stored_steps(path: Path) -> dict[tuple[str, str], tuple[Step, ...]]:
    """(task, sample_id) → its recorded steps in order, as far as they run unbroken from step 0
    (a later step without its predecessors cannot be continued)."""
    found: dict[tuple[str, str], dict[int, Step]] = {}
    for record in read_jsonl(path, StepRecord.from_dict):
        found.setdefault((record.task, record.sample_id), {})[record.step.index] = record.step
    out = {}
    for key, by_index in found.items():
        steps: list[Step] = []
        while len(steps) in by_index:
            steps.append(by_index[len(steps)])
        out[key] = tuple(steps)
    return out
