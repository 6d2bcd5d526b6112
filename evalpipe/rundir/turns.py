"""turns.jsonl: the checkpoint of multi-turn samples, one line per answered turn but the last
(the last turn's answer completes the sample's line in samples.jsonl)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalpipe.rundir.jsonlog import read_jsonl


@dataclass(frozen=True, kw_only=True)
class TurnRecord:
    """One answered turn (numbered from 0) of one multi-turn sample."""

    task: str
    sample_id: str
    turn: int
    text: str
    prompt_tokens: int
    completion_tokens: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "sample_id": self.sample_id,
            "turn": self.turn,
            "text": self.text,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TurnRecord:
        return cls(
            task=str(data["task"]),
            sample_id=str(data["sample_id"]),
            turn=int(data["turn"]),
            text=str(data["text"]),
            prompt_tokens=int(data["prompt_tokens"]),
            completion_tokens=int(data["completion_tokens"]),
        )


def stored_answers(path: Path) -> dict[tuple[str, str], tuple[str, ...]]:
    """(task, sample_id) → the answers of its first turns, in order, as far as they run
    unbroken from turn 0 (a later turn without its predecessors cannot be continued)."""
    turns: dict[tuple[str, str], dict[int, str]] = {}
    for record in read_jsonl(path, TurnRecord.from_dict):
        turns.setdefault((record.task, record.sample_id), {})[record.turn] = record.text
    out = {}
    for key, by_turn in turns.items():
        answers = []
        while len(answers) in by_turn:
            answers.append(by_turn[len(answers)])
        out[key] = tuple(answers)
    return out
