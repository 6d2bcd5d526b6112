"""Fitting a prompt into the engine's context: lm-eval's left truncation for the prompts lm-eval
renders, and a refusal (records/refusal.py) for an engine's per-request error.

lm-eval's vLLM backend (lm_eval/models/vllm_causallms.py, 0.4.13) never refuses an over-long
context: a generation keeps the last max_length - max_gen_toks context tokens
(models/utils.maybe_truncate, side "left"), a log-likelihood the last max_length - 1 tokens of
context + continuation. evalpipe applies the same rules to `Rendered` prompts so its scores
stay equal to lm-eval's; every other prompt that does not fit is refused, never cut."""

from __future__ import annotations

import re

from evalpipe.records.refusal import Refusal


def lmeval_generation_ids(ids: list[int], limit: int, max_tokens: int) -> list[int]:
    """A generation's context as lm-eval's vLLM backend sends it: whole when it fits with
    `max_tokens`, else its last `limit - max_tokens` tokens (a Python slice, as lm-eval's)."""
    if len(ids) + max_tokens <= limit:
        return ids
    return ids[-(limit - max_tokens) :]


def lmeval_scoring_pair(ids: list[int], start: int, limit: int) -> tuple[list[int], int]:
    """Context + continuation ids (the continuation from `start`) as lm-eval's vLLM backend
    scores them: the last `limit - 1` tokens (vLLM needs room for one generated token), the
    context shortened by what was cut."""
    keep = limit - 1
    return ids[-keep:], start - max(0, len(ids) - keep)


# The numbers in vLLM's and OpenAI-compatible servers' context-length refusals, e.g. "This
# model's maximum context length is 1024 tokens. However, your prompt contains 15071 input
# tokens" or "The decoder prompt (length 1500) is longer than the maximum model length of 1024".
# A server that refuses by characters before tokenising says no token count: None.
_LIMIT = re.compile(r"maximum (?:context|model) length (?:is |of )?(\d+)", re.IGNORECASE)
_PROMPT = re.compile(
    r"prompt \(length (\d+)\)|contains (?:at least )?(\d+) input tokens|(\d+) in the messages",
    re.IGNORECASE,
)


def refusal_of(message: str) -> Refusal:
    """The refusal an engine's per-request error message stands for: a context overflow (with
    the token counts it names) when it speaks of the maximum context or model length, else a
    plain refusal."""
    limit = _LIMIT.search(message)
    if limit is None:
        return Refusal(reason="refused", detail=message)
    prompt = _PROMPT.search(message)
    tokens = None if prompt is None else int(next(g for g in prompt.groups() if g))
    return Refusal(
        reason="context_overflow",
        prompt_tokens=tokens,
        limit=int(limit.group(1)),
        detail=message,
    )
