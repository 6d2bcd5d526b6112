"""Why the engine answered one request with nothing: its prompt outgrew the context, or the
engine refused the request for another reason of its own. A refusal fails that sample, never
the run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

# context_overflow: the prompt leaves no room for one generated token in the context;
# refused: the engine rejected the request for another reason (its detail says which).
Reason = Literal["context_overflow", "refused"]
REASONS: tuple[Reason, ...] = ("context_overflow", "refused")


@dataclass(frozen=True, kw_only=True)
class Refusal:
    """One request the engine did not run: the reason, the prompt's tokens and the context's
    limit where known (None: the server did not say), and the engine's own words."""

    reason: Reason
    prompt_tokens: int | None = None
    limit: int | None = None
    detail: str = ""

    def __post_init__(self) -> None:
        if self.reason not in REASONS:
            raise ValueError(f"refusal reason {self.reason!r} is not one of {', '.join(REASONS)}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "prompt_tokens": self.prompt_tokens,
            "limit": self.limit,
            "detail": self.detail,
        }

    @classmethod
    def from_dict(cls, data: Any) -> Refusal:
        """Raises ValueError when `data` is not a refusal."""
        if not isinstance(data, dict):
            raise ValueError(f"a refusal must be a JSON object, got {type(data).__name__}")
        tokens, limit = data.get("prompt_tokens"), data.get("limit")
        return cls(
            reason=data.get("reason"),  # type: ignore[arg-type]  # checked in __post_init__
            prompt_tokens=None if tokens is None else int(tokens),
            limit=None if limit is None else int(limit),
            detail=str(data.get("detail") or ""),
        )


def overflow(prompt_tokens: int, limit: int) -> Refusal | None:
    """The refusal for a prompt of `prompt_tokens` in a context of `limit` tokens, or None when
    it fits: the prompt and at least one generated token must fit (vLLM refuses a prompt as
    long as the context). A completion that would run past the context is cut at it instead,
    as vLLM does, whatever max_tokens says."""
    if prompt_tokens < limit:
        return None
    return Refusal(
        reason="context_overflow",
        prompt_tokens=prompt_tokens,
        limit=limit,
        detail=f"the prompt has {prompt_tokens} tokens; the context holds {limit}, and at "
        "least one generated token must fit beside the prompt",
    )
