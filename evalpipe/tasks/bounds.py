"""How long a run's sequences can get (prompt + answer), bounded without loading a tokenizer.

The engine is told this as the shortest max_model_len the tasks allow: the OOM ladder may
shorten the context down to it, never below.
"""

from __future__ import annotations

from collections.abc import Sequence

from evalpipe.catalog.budgets import TEMPLATE_TOKENS
from evalpipe.records.prompt import Prompt
from evalpipe.tasks.base import Sample, Task

# Per further message, beyond the chat template's TEMPLATE_TOKENS. Generous on purpose: see
# prompt_token_bound.
MESSAGE_TOKENS = 8


def prompt_token_bound(prompt: Prompt) -> int:
    """An upper bound on a prompt's length in tokens, without loading a tokenizer: byte-level
    BPE and byte-fallback tokenizers spend at least one UTF-8 byte per token."""
    if isinstance(prompt, str):
        return TEMPLATE_TOKENS + len(prompt.encode())
    return TEMPLATE_TOKENS + sum(
        len(str(m.get("content", "")).encode()) + MESSAGE_TOKENS for m in prompt
    )


def needed_model_len(work: Sequence[tuple[Task, Sequence[Sample]]]) -> int:
    """The longest sequence the run may need (prompt bound + max_tokens): the OOM ladder may
    shorten max_model_len down to this, never below."""
    return max(
        (prompt_token_bound(s.prompt) + _answer_bound(task, s) for task, ss in work for s in ss),
        default=1,
    )


def _answer_bound(task: Task, sample: Sample) -> int:
    if sample.options:  # scored, not generated
        return max(len(option.continuation.encode()) for option in sample.options)
    return task.sampling.max_tokens
