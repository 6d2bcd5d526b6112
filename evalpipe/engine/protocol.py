"""The Engine interface every backend implements, and the values only engines and their
runner use (the requests and completions that cross it are evalpipe.records)."""

from __future__ import annotations

import contextlib
import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from evalpipe.core.errors import EngineError
from evalpipe.records.completion import Completion, Generation, Loglikelihood
from evalpipe.records.prompt import Prompt
from evalpipe.records.request import Request
from evalpipe.records.sampling import SamplingSettings


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

    def ready(self) -> bool:
        """Whether `step` would come back without waiting for a request to finish (an engine
        polled beside another one: engines that step in this process always are)."""
        return True

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
