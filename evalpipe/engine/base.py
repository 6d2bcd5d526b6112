"""The Engine interface every backend implements, and the values that cross it."""

from __future__ import annotations

import contextlib
import json
import math
import sys
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from evalpipe.catalog.budgets import DEFAULT_MAX_TOKENS, DEFAULT_N
from evalpipe.core.configio import as_config
from evalpipe.core.errors import ConfigError, EngineError

# A prompt is plain text, or chat messages ({"role": ..., "content": ...}). A plain-text prompt
# sent to a chat model becomes one user message.
Prompt = str | list[dict[str, str]]


class Rendered(str):
    """A prompt its task has already rendered (lm-eval's few-shot context, with any chat
    template applied): engines send it as it is, with no chat template, stripping or BOS of
    their own, tokenised the way lm-eval's vLLM backend tokenises (engine/rendering.py). A `str`,
    so sample records, fingerprints and the fake engine see its plain text."""

    __slots__ = ()


# describe()["device"] of an engine whose model runs on a server elsewhere: reports show the
# run's device as this instead of the client's CPU readings.
REMOTE_DEVICE = "remote"


@dataclass(frozen=True, kw_only=True)
class SamplingSettings:
    """How to generate for one task (mirrors vLLM's SamplingParams)."""

    max_tokens: int = DEFAULT_MAX_TOKENS
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0  # sample from the k likeliest tokens; 0: all (vLLM's "off")
    min_p: float = 0.0  # drop tokens below min_p × the likeliest token's probability; 0: off
    n: int = DEFAULT_N
    stop: tuple[str, ...] = ()
    seed: int = 0
    # Generate exactly max_tokens, past the end-of-sequence token (benchmarks, probes).
    ignore_eos: bool = False
    # Special tokens (<|im_start|>, …) left out of the text; lm-eval's vLLM backend keeps them.
    skip_special_tokens: bool = True

    # Added after the first run-directory schema (see configio.as_config).
    LATER: ClassVar[tuple[str, ...]] = ("ignore_eos", "top_k", "min_p", "skip_special_tokens")

    def to_dict(self) -> dict[str, Any]:
        """The settings as a run's configuration records and fingerprints them."""
        return as_config(self)


class SeenSampling:
    """The distinct sampling settings an engine was given, in first-seen order: its describe()
    reports them as what it generated with (each task may have its own)."""

    def __init__(self) -> None:
        self._seen: dict[str, dict[str, Any]] = {}

    def add(self, fields: dict[str, Any]) -> None:
        self._seen.setdefault(json.dumps(fields, sort_keys=True), fields)

    def to_list(self) -> list[dict[str, Any]]:
        return list(self._seen.values())


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


@dataclass(frozen=True, kw_only=True)
class Slots:
    """The engine's sequence slots during its last step: how many held a sequence, of its cap
    (vLLM's max_num_seqs), and how many sequences the step preempted (vLLM frees a running
    sequence's KV cache when the cache is full, and computes it again later). A decoding
    sequence makes one token per step, so `busy` is also the step's generated tokens (prefill
    steps aside)."""

    busy: int
    total: int
    preempted: int = 0


@dataclass(frozen=True, kw_only=True)
class Room:
    """What the engine can hold at once: its sequence slots (vLLM's max_num_seqs) and its KV
    cache in tokens, allocated in blocks of `block` tokens. Replicas add up."""

    slots: int
    kv_tokens: int
    block: int = 1

    def __add__(self, other: Room) -> Room:
        return Room(
            slots=self.slots + other.slots,
            kv_tokens=self.kv_tokens + other.kv_tokens,
            block=max(self.block, other.block),
        )


@dataclass(frozen=True, kw_only=True)
class Completion:
    """A finished request: its generation, or one log-likelihood per continuation in order."""

    id: str
    generation: Generation | None = None
    loglikelihoods: tuple[Loglikelihood, ...] = ()


class Engine(ABC):
    """A loaded model that takes requests as they come and hands each back when it finishes.

    The runner keeps `capacity` requests admitted (`add`) and calls `step` in a loop; every
    finished request comes back exactly once, in any order. `abort` drops what is in flight (a
    stop signal does not wait for long generations)."""

    backend: ClassVar[str]

    @property
    def capacity(self) -> int:
        """Requests to keep admitted so the engine's batch stays full, with some queued."""
        return 256

    @abstractmethod
    def add(self, requests: Sequence[Request]) -> None:
        """Admit requests; ids must be unique among those in flight."""

    @abstractmethod
    def step(self) -> list[Completion]:
        """Advance the engine by one step and return the requests that finished in it."""

    @abstractmethod
    def in_flight(self) -> int:
        """Admitted requests not yet returned by `step`."""

    @abstractmethod
    def abort(self) -> list[str]:
        """Drop every request in flight; return their ids."""

    @abstractmethod
    def close(self) -> None:
        """Free the model; safe to call twice."""

    def describe(self) -> dict[str, Any]:
        """What was loaded and how: for the run manifest."""
        return {"backend": self.backend}

    @property
    def fallback_steps(self) -> list[str]:
        """The out-of-memory fallback steps taken so far (they can change while it runs)."""
        return []

    def slots(self) -> Slots | None:
        """The sequence slots busy during the last `step`; None where the engine cannot tell
        (a remote server, replicas in other processes)."""
        return None

    def room(self) -> Room | None:
        """The slots and KV cache the loaded engine has; None where it cannot tell (a remote
        server)."""
        return None

    # -- whole batches, for callers that want every answer at once -------------------------

    def run(self, requests: Sequence[Request]) -> list[Completion]:
        """Every request's completion, in request order. On a failure nothing of it stays in
        flight, so the engine serves the next call."""
        self.add(requests)
        found: dict[str, Completion] = {}
        try:
            while len(found) < len(requests):
                if not self.in_flight():
                    missing = [r.id for r in requests if r.id not in found]
                    raise EngineError(
                        f"The {self.backend} engine dropped {len(missing)} request(s), e.g. "
                        f"{missing[0]!r}; every admitted request must finish or be aborted."
                    )
                for completion in self.step():
                    found[completion.id] = completion
        except BaseException:
            with contextlib.suppress(Exception):  # the first failure is the one to report
                self.abort()
            raise
        return [found[r.id] for r in requests]

    def generate(
        self, prompts: Sequence[Prompt], settings: SamplingSettings, *, top_logprobs: int = 0
    ) -> list[Generation]:
        """Completions for every prompt, in order (with `top_logprobs`, their steps too)."""
        done = self.run(
            [
                Request(id=str(i), prompt=p, sampling=settings, top_logprobs=top_logprobs)
                for i, p in enumerate(prompts)
            ]
        )
        return [_generation(c) for c in done]

    def loglikelihoods(self, requests: Sequence[tuple[Prompt, str]]) -> list[Loglikelihood]:
        """log p(continuation | prompt) for each (prompt, continuation), in order."""
        groups: dict[str, tuple[Prompt, list[int]]] = {}
        for i, (prompt, _) in enumerate(requests):
            key = prompt if isinstance(prompt, str) else json.dumps(prompt)
            groups.setdefault(key, (prompt, []))[1].append(i)
        batch = [
            Request(id=str(n), prompt=prompt, continuations=tuple(requests[i][1] for i in members))
            for n, (prompt, members) in enumerate(groups.values())
        ]
        found: dict[int, Loglikelihood] = {}
        for (_, members), done in zip(groups.values(), self.run(batch), strict=True):
            found.update(zip(members, done.loglikelihoods, strict=True))
        return [found[i] for i in range(len(requests))]


def _generation(completion: Completion) -> Generation:
    if completion.generation is None:
        raise EngineError(f"Request {completion.id!r} finished without a generation.")
    return completion.generation


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
    # vLLM's batch-invariant kernels where the platform has them (GPUs; not the CPU build).
    deterministic: bool = False
