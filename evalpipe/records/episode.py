"""The values of an episode (a sample whose next request comes from its recorded history and an
environment): the request of its next step, one resolved step, the end of an episode with its
reason, and an episode that may not start yet."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from evalpipe.records.prompt import Prompt
from evalpipe.records.sampling import SamplingSettings
from evalpipe.records.tools import ToolCalls, ToolChoice

# Who answers a step's request: the evaluated model, or the user simulator of an agent task
# (τ²-bench), which may be another model in another engine.
Answerer = Literal["model", "user_sim"]
ANSWERERS: tuple[Answerer, ...] = ("model", "user_sim")


@dataclass(frozen=True, kw_only=True)
class StepRequest:
    """An episode's next request: its prompt, the tools it offers (its own, as a τ² user's
    differ from the agent's), who answers it, and its sampling where it is not the task's
    (τ²'s per-trial seed)."""

    prompt: Prompt
    tools: tuple[dict[str, Any], ...] = ()
    tool_choice: ToolChoice = "auto"
    by: Answerer = "model"
    sampling: SamplingSettings | None = None


@dataclass(frozen=True, kw_only=True)
class Step:
    """One answered request of an episode (numbered from 0), who answered it, the calls parsed
    from its answer (None when the request offered no tools), and what its environment made of
    it (`outcome`: the task's JSON, e.g. BFCL's decoded calls and their execution results)."""

    index: int
    text: str
    prompt_tokens: int
    completion_tokens: int
    outcome: Mapping[str, Any] = field(default_factory=dict)
    by: Answerer = "model"
    calls: ToolCalls | None = None

    def call_id(self, position: int) -> str:
        """The id of the step's call at `position` in the chat that follows it: fixed by the
        step, so a resumed episode's history is the one it had."""
        return f"call_{self.index}_{position}"

    def to_dict(self) -> dict[str, Any]:
        data = {
            "index": self.index,
            "text": self.text,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "outcome": dict(self.outcome),
        }
        # Written only when set, so steps recorded before them read back the same.
        if self.by != "model":
            data["by"] = self.by
        if self.calls is not None:
            data["calls"] = self.calls.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Step:
        by = data.get("by", "model")
        if by not in ANSWERERS:
            raise ValueError(f"step 'by' must be one of {', '.join(ANSWERERS)}, got {by!r}")
        calls = data.get("calls")
        return cls(
            index=int(data["index"]),
            text=str(data["text"]),
            prompt_tokens=int(data["prompt_tokens"]),
            completion_tokens=int(data["completion_tokens"]),
            outcome=dict(data.get("outcome") or {}),
            by=by,
            calls=None if calls is None else ToolCalls.from_dict(calls),
        )


@dataclass(frozen=True, kw_only=True)
class Ended:
    """An episode with no next request: why (the task's word: "finished", "step_limit", …)."""

    reason: str


@dataclass(frozen=True, kw_only=True)
class Blocked:
    """An episode that may not start before other episodes of the run ended (BFCL's memory
    questions after their prerequisite conversations): the ids of those it waits for."""

    after: tuple[str, ...]
