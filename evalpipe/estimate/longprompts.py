"""A task's longest prompt against the context, before a job runs: `evalpipe check` and
`plan --estimate` warn on the login node of the samples the run will record as context_overflow
(scored 0), or, for lm-eval's prompts, cut from the left as lm-eval cuts them.

Only the prompts longest in bytes are tokenised (the preset's tokenizer where its files are on
this machine, else bytes per token), so a large task costs a handful of encodings."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from evalpipe.records.prompt import Prompt, Rendered, message_text, messages, tools_shown
from evalpipe.records.refusal import overflow
from evalpipe.tasks.base import Sample

# Prompts, longest in bytes first, whose tokens are counted.
CANDIDATES = 8


@dataclass(frozen=True, kw_only=True)
class LongPrompt:
    """A task's longest prompt, which leaves no room for an answer in the context."""

    task: str
    sample_id: str
    tokens: int
    limit: int
    ceiling: int  # the longest context the model can have (Architecture.context_ceiling)
    counted: bool  # tokenised with the preset's tokenizer; False: estimated from its bytes
    cut: bool  # lm-eval's rendered prompt: cut from the left, not refused

    def line(self) -> str:
        about = "" if self.counted else "about "
        outcome = (
            "it is cut from the left to fit, as lm-eval cuts it"
            if self.cut
            else "the run records it as context_overflow and scores it 0"
        )
        fix = (
            f"--max-model-len above {self.tokens:,} fits it (the model has "
            f"{self.ceiling:,} positions)"
            if self.tokens < self.ceiling
            else f"the model's {self.ceiling:,} positions cannot hold it"
        )
        return (
            f"task {self.task}: its longest prompt (sample {self.sample_id!r}, {about}"
            f"{self.tokens:,} tokens) leaves no room for an answer in the context of "
            f"{self.limit:,} tokens, so {outcome}; {fix}"
        )


def prompt_bytes(prompt: Prompt) -> int:
    return sum(len(message_text(m).encode()) for m in messages(prompt))


def counted_prompt(sample: Sample) -> Prompt:
    """The prompt as the estimate counts it: a sample's tools are rendered by the chat template
    into the prompt, so they count as one more message of their JSON text (tools_shown)."""
    return tools_shown(sample.prompt, sample.tools)


def longest_prompt(
    task: str,
    samples: Sequence[Sample],
    count: Callable[[Prompt], int],
    limit: int,
    *,
    ceiling: int,
    counted: bool,
) -> LongPrompt | None:
    """The longest of `samples`' prompts (tokens by `count`) when it cannot fit `limit` with
    one generated token; None when every prompt fits."""
    candidates = sorted(samples, key=lambda s: prompt_bytes(counted_prompt(s)), reverse=True)
    found = [(count(counted_prompt(s)), s) for s in candidates[:CANDIDATES]]
    if not found:
        return None
    tokens, sample = max(found, key=lambda pair: pair[0])
    if overflow(tokens, limit) is None:
        return None
    return LongPrompt(
        task=task,
        sample_id=sample.id,
        tokens=tokens,
        limit=limit,
        ceiling=ceiling,
        counted=counted,
        cut=isinstance(sample.prompt, Rendered),
    )
