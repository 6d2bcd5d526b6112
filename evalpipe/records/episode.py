"""The values of an episode (a sample whose next request comes from its recorded history and an
environment): one resolved step, and the end of an episode with its reason."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, kw_only=True)
class Step:
    """One answered request of an episode (numbered from 0) and what its environment made of it
    (`outcome`: the task's JSON, e.g. BFCL's decoded calls and their execution results)."""

    index: int
    text: str
    prompt_tokens: int
    completion_tokens: int
    outcome: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "text": self.text,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "outcome": dict(self.outcome),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Step:
        return cls(
            index=int(data["index"]),
            text=str(data["text"]),
            prompt_tokens=int(data["prompt_tokens"]),
            completion_tokens=int(data["completion_tokens"]),
            outcome=dict(data.get("outcome") or {}),
        )


@dataclass(frozen=True, kw_only=True)
class Ended:
    """An episode with no next request: why (the task's word: "finished", "step_limit", …)."""

    reason: str
