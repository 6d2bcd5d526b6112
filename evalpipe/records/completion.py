"""A finished request: its generated texts (with token steps when asked) or the
log-likelihoods of its continuations."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from evalpipe.core.errors import EngineError
from evalpipe.records.refusal import Refusal
from evalpipe.records.tools import ToolCalls


@dataclass(frozen=True, kw_only=True)
class TokenStep:
    """One generated token and the likeliest tokens the model saw at its position."""

    token: int  # the generated token's id
    logprob: float  # its log-probability, natural log
    top: tuple[tuple[int, float], ...]  # (token id, log-probability), likeliest first


@dataclass(frozen=True, kw_only=True)
class Generation:
    """The n completions for one prompt and their token counts."""

    texts: tuple[str, ...]
    prompt_tokens: int
    completion_tokens: tuple[int, ...]
    # One tuple of steps per completion when the request asked for top_logprobs; else empty.
    steps: tuple[tuple[TokenStep, ...], ...] = ()
    # One entry per completion when the request offered tools (else empty): the calls parsed
    # from its answer; `texts` keep the raw completions.
    tool_calls: tuple[ToolCalls, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Loglikelihood:
    """How likely the model finds a continuation of a prompt (nothing is generated)."""

    logprob: float  # sum of the continuation tokens' log-probabilities, natural log
    tokens: int  # continuation tokens
    prompt_tokens: int  # tokens before the continuation (after any chat template)
    # Whether every continuation token was the model's likeliest at its position (lm-eval's
    # `is_greedy`, which its loglikelihood `acc` needs); None where the engine cannot tell.
    is_greedy: bool | None = None

    @classmethod
    def of(
        cls,
        logprobs: Sequence[float],
        *,
        prompt_tokens: int,
        source: str,
        is_greedy: bool | None = None,
    ) -> Loglikelihood:
        """The continuation scored by the sum of its tokens' `logprobs` (from `source`)."""
        total = math.fsum(logprobs)
        if math.isnan(total):
            raise EngineError(
                f"{source} returned NaN log-probabilities; the model's weights or dtype are "
                "broken for this input."
            )
        # A probability that underflowed to -inf is stored as the lowest finite float (JSON).
        return cls(
            logprob=max(total, -sys.float_info.max),
            tokens=len(logprobs),
            prompt_tokens=prompt_tokens,
            is_greedy=is_greedy,
        )


@dataclass(frozen=True, kw_only=True)
class Completion:
    """A finished request: its generation, or one log-likelihood per continuation in order,
    or the engine's refusal to run it (then neither)."""

    id: str
    generation: Generation | None = None
    loglikelihoods: tuple[Loglikelihood, ...] = ()
    refusal: Refusal | None = None
