"""A prompt: plain text, chat messages, or text its task has already rendered."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

# Plain text, or chat messages ({"role": ..., "content": ...}). A plain-text prompt sent to a
# chat model becomes one user message (`messages`).
Prompt = str | list[dict[str, str]]


class Rendered(str):
    """A prompt its task has already rendered (lm-eval's few-shot context, with any chat
    template applied): engines send it as it is, with no chat template, stripping or BOS of
    their own, tokenised the way lm-eval's vLLM backend tokenises (engine/rendering.py). A `str`,
    so sample records, fingerprints and the fake engine see its plain text."""

    __slots__ = ()


def messages(prompt: Prompt) -> list[dict[str, str]]:
    """Chat messages for a prompt: plain text becomes one user message."""
    return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)


def message_text(message: Mapping[str, Any]) -> str:
    """What a chat message sends as text: its content (None beside tool calls: none) and its
    tool calls as JSON (an agent's step of an episode)."""
    calls = message.get("tool_calls")
    return (message.get("content") or "") + (json.dumps(calls, ensure_ascii=False) if calls else "")


def tools_shown(prompt: Prompt, tools: Sequence[Mapping[str, Any]]) -> Prompt:
    """The prompt with its tools as chat templates that show tools render them (a system block
    listing their JSON), for counting what a request sends: one more message of their JSON."""
    if not tools or isinstance(prompt, Rendered):
        return prompt
    listed = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools)
    return [{"role": "system", "content": listed}, *messages(prompt)]
