"""The Engine protocol and the values that cross it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

# A prompt is plain text, or chat messages ({"role": ..., "content": ...}). A plain-text prompt
# sent to a chat model becomes one user message.
Prompt = str | list[dict[str, str]]


@dataclass(frozen=True, kw_only=True)
class SamplingSettings:
    """How to generate for one task (mirrors vLLM's SamplingParams)."""

    max_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    n: int = 1
    stop: tuple[str, ...] = ()
    seed: int = 0


@dataclass(frozen=True, kw_only=True)
class Generation:
    """The n completions for one prompt and their token counts."""

    texts: tuple[str, ...]
    prompt_tokens: int
    completion_tokens: tuple[int, ...]
    # Multiple choice by log-probabilities: log p(option | prompt) per option, in option order;
    # `texts` then holds the most likely option. Empty for generated completions.
    option_logprobs: tuple[float, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Loglikelihood:
    """How likely the model finds a continuation of a prompt (nothing is generated)."""

    logprob: float  # sum of the continuation tokens' log-probabilities, natural log
    tokens: int  # continuation tokens
    prompt_tokens: int  # tokens before the continuation (after any chat template)


class Engine(Protocol):
    """Anything that turns a batch of prompts into generations, in order."""

    def generate(
        self, prompts: Sequence[Prompt], settings: SamplingSettings
    ) -> list[Generation]: ...

    def loglikelihoods(self, requests: Sequence[tuple[Prompt, str]]) -> list[Loglikelihood]:
        """log p(continuation | prompt) for each (prompt, continuation), in order. A chat
        model's continuation starts its reply, so leading whitespace is dropped for it."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True, kw_only=True)
class EngineSettings:
    """How to build an engine for one preset: the layout from the planner plus overrides."""

    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    max_model_len: int | None = None  # None: the preset's
    gpu_memory_utilization: float | None = None  # None: the preset's
    # "ray" when the job spans nodes; None lets vLLM choose (multiprocessing on one node).
    distributed_executor_backend: str | None = None
    oom_fallback: bool = True  # step down settings on out-of-memory instead of failing
    # The longest sequence the tasks need (prompt + max_tokens): the OOM ladder may shorten
    # max_model_len down to this, never below; None forbids shortening.
    min_model_len: int | None = None
