"""A reasoning model's share of a completion's tokens (the split itself is
evalpipe/records/reasoning.py `split`, which the engine also uses before parsing tool calls)."""

from __future__ import annotations


def reasoning_tokens(completion_tokens: int, completion: str, reasoning: str | None) -> int:
    """The reasoning's share of a completion's tokens, by characters (the scorer has no
    tokenizer); 0 without reasoning, all of them when the completion is nothing else."""
    if not reasoning or not completion:
        return 0
    return min(completion_tokens, round(completion_tokens * len(reasoning) / len(completion)))
