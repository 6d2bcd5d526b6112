"""One unit of engine work: what to generate for a prompt, or which continuations to score."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evalpipe.core.errors import ConfigError
from evalpipe.records.prompt import Prompt
from evalpipe.records.sampling import SamplingSettings
from evalpipe.records.tools import ToolChoice, check_schema, check_tools, forced_name

# vLLM's default cap on log-probabilities per token (max_logprobs).
MAX_TOP_LOGPROBS = 20


@dataclass(frozen=True, kw_only=True)
class Request:
    """One unit of engine work: generate for `prompt` with `sampling`, or score each of
    `continuations` after it (log p(continuation | prompt); a chat model's continuation starts
    its reply, so leading whitespace is dropped for it)."""

    id: str
    prompt: Prompt
    sampling: SamplingSettings | None = None
    continuations: tuple[str, ...] = ()
    # Also return each generated token with this many likeliest tokens at its position
    # (Generation.steps): how tests tell a near-tie from a real difference between two runs.
    # Not a sampling setting: it changes no text, so runs neither record nor fingerprint it.
    top_logprobs: int = 0
    # OpenAI function tools the chat template shows the model, and whether it must call one
    # ("auto", "none", "required" or {"type": "function", "function": {"name": ...}}).
    tools: tuple[dict[str, Any], ...] = ()
    tool_choice: ToolChoice = "auto"
    # A JSON schema the completion must follow (structured outputs); None: free text.
    json_schema: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if (self.sampling is None) == (not self.continuations):
            raise ConfigError(
                f"Request {self.id!r} must either generate (sampling) or score continuations, "
                "not both or neither."
            )
        if not 0 <= self.top_logprobs <= MAX_TOP_LOGPROBS or (
            self.top_logprobs and self.sampling is None
        ):
            raise ConfigError(
                f"Request {self.id!r}: top_logprobs={self.top_logprobs!r} must be 0 to "
                f"{MAX_TOP_LOGPROBS}, and only a generating request (sampling) can ask for them."
            )
        if (self.tools or self.json_schema is not None) and self.sampling is None:
            raise ConfigError(
                f"Request {self.id!r}: tools and json_schema need a generating request "
                "(sampling), not one that scores continuations."
            )
        where = f"Request {self.id!r}"
        try:
            check_tools(self.tools, self.tool_choice, where=where)
            if self.json_schema is not None:
                check_schema(self.json_schema, where=f"{where}: json_schema")
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if self.json_schema is not None and (
            self.tool_choice == "required" or forced_name(self.tool_choice) is not None
        ):
            raise ConfigError(
                f"{where}: tool_choice {self.tool_choice!r} constrains the output to a tool "
                "call, so it cannot also follow json_schema; drop one of them."
            )
