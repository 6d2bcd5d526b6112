"""A deterministic scripted engine: same prompt, same completion, in any process, no model.

Used by the tests and by `evalpipe run --backend fake` (pipeline and SLURM checks without vLLM).
A completion comes from the first `script` entry whose key occurs in the prompt, else from a
stable hash of the prompt, so reruns, resumes and shards see identical outputs. For a request
with tools, the calls are read from the completion as hermes writes them (`<tool_call>{"name":
…, "arguments": …}</tool_call>`), or as JSON under a required or named tool_choice.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from evalpipe import __version__
from evalpipe.catalog.preset import Preset
from evalpipe.core.errors import ConfigError, EngineError
from evalpipe.engine.protocol import Engine, EngineSettings, Room, SeenSampling, Slots
from evalpipe.records.completion import Completion, Generation, Loglikelihood, TokenStep
from evalpipe.records.prompt import Prompt, Rendered
from evalpipe.records.reasoning import split
from evalpipe.records.refusal import overflow
from evalpipe.records.request import Request
from evalpipe.records.sampling import SamplingSettings
from evalpipe.records.tools import ToolCall, ToolCalls, read_forced

# Seconds each request takes when no delay is passed in: lets a SLURM job run with
# `--backend fake` live long enough to be preempted in a test, and benchmarks give it a latency.
DELAY_ENV = "EVALPIPE_FAKE_DELAY_S"


def prompt_text(prompt: Prompt) -> str:
    """The prompt as one string; chat messages become 'role: content' lines."""
    if isinstance(prompt, str):
        return prompt
    return "\n".join(f"{m.get('role', 'user')}: {m.get('content', '')}" for m in prompt)


def _env_delay() -> float:
    raw = os.environ.get(DELAY_ENV, "")
    if not raw:
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value < 0:
        raise ConfigError(f"{DELAY_ENV}={raw!r} must be a non-negative number of seconds.")
    return value


class FakeEngine(Engine):
    """Engine implementation with scripted or hash-derived completions.

    Token counts are whitespace-separated words. Up to `max_num_seqs` requests run at once,
    each for `delay_s` (a fixed per-request latency); the rest wait their turn. With `token_s`,
    it decodes as vLLM does instead: each step makes one token of every running sequence and
    takes `token_s`, so a request holds its slot for as many steps as its longest completion
    has words (what makes admission order matter). `served` lists
    every prompt text answered, in the order requests finished, so tests can check what a
    resumed run asked for; `sampling` holds the distinct settings it generated with.
    `kv_tokens` is the KV cache `room` reports (what
    admission checks the longest samples against; the fake engine holds no cache and preempts
    nothing). A prompt of as many words as the context (`settings.max_model_len`, else the
    preset's) is refused as vLLM refuses it, except one lm-eval rendered (`Rendered`: lm-eval
    cuts it to fit, engine/contextfit.py), which is answered whole.
    """

    backend = "fake"

    def __init__(
        self,
        preset: Preset,
        settings: EngineSettings,
        *,
        script: Mapping[str, str] | None = None,
        delay_s: float | None = None,
        max_num_seqs: int = 8,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        token_s: float | None = None,
        kv_tokens: int | None = None,
    ) -> None:
        self.preset = preset
        self.settings = settings
        self.script = dict(script or {})
        self.delay_s = _env_delay() if delay_s is None else delay_s
        self.max_num_seqs = max_num_seqs
        self.token_s = token_s
        self.kv_tokens = kv_tokens
        self.served: list[str] = []
        self.sampling = SeenSampling()
        self.closed = False
        self._clock = clock
        self._sleep = sleep
        self._waiting: dict[str, Request] = {}
        # id → (finishes at, request): a clock time, or with token_s a step number
        self._running: dict[str, tuple[float, Request]] = {}
        self._steps = 0  # decoding steps taken (token_s)
        self._busy = 0  # sequences in the last step

    @property
    def capacity(self) -> int:
        return 2 * self.max_num_seqs

    def add(self, requests: Sequence[Request]) -> None:
        self._check_open()
        for request in requests:
            if request.id in self._waiting or request.id in self._running:
                raise EngineError(f"Request id {request.id!r} is already in flight.")
            self._waiting[request.id] = request
        self._schedule()

    def step(self) -> list[Completion]:
        self._check_open()
        if not self._running:
            return []
        self._busy = len(self._running)
        if self.token_s is None:
            wait = min(at for at, _ in self._running.values()) - self._clock()
            if wait > 0:
                self._sleep(wait)
            now = self._clock()
        else:  # one decoding step of every running sequence
            self._sleep(self.token_s)
            self._steps += 1
            now = self._steps
        ready = [rid for rid, (at, _) in self._running.items() if at <= now]
        done = [self._answer(self._running.pop(rid)[1]) for rid in ready]
        self._schedule()
        return done

    def _schedule(self) -> None:
        """Start waiting requests while fewer than max_num_seqs run (as vLLM's scheduler)."""
        now = self._clock()
        while self._waiting and len(self._running) < self.max_num_seqs:
            rid = next(iter(self._waiting))
            request = self._waiting.pop(rid)
            if self.token_s is None:
                self._running[rid] = (now + self.delay_s, request)
            else:
                self._running[rid] = (self._steps + self._length(request), request)

    def _length(self, request: Request) -> int:
        """Decoding steps a request takes: its longest completion's words (≥ 1), or its whole
        max_tokens where it ignores the end of text (as vLLM decodes it)."""
        settings = request.sampling
        if settings is None:
            return 1
        if settings.ignore_eos and settings.max_tokens:
            return settings.max_tokens
        text = prompt_text(request.prompt)
        texts = [self._completion(text, settings, i) for i in range(settings.n)]
        return max(1, *(len(_truncate(t, settings).split()) for t in texts))

    def slots(self) -> Slots:
        return Slots(busy=self._busy, total=self.max_num_seqs)

    def room(self) -> Room | None:
        """The slots, and the KV cache a test says it has (it holds no cache: nothing is
        preempted)."""
        if self.kv_tokens is None:
            return None
        return Room(slots=self.max_num_seqs, kv_tokens=self.kv_tokens)

    def in_flight(self) -> int:
        return len(self._waiting) + len(self._running)

    def abort(self) -> list[str]:
        ids = [*self._running, *self._waiting]
        self._running.clear()
        self._waiting.clear()
        return ids

    def _answer(self, request: Request) -> Completion:
        text = prompt_text(request.prompt)
        limit = self.settings.max_model_len or self.preset.max_model_len
        refusal = overflow(len(text.split()), limit)
        if refusal is not None and not isinstance(request.prompt, Rendered):
            return Completion(id=request.id, refusal=refusal)
        self.served.append(text)
        if request.sampling is None:
            return Completion(
                id=request.id,
                loglikelihoods=tuple(self._loglikelihood(text, c) for c in request.continuations),
            )
        settings = request.sampling
        self.sampling.add(settings.to_dict())
        texts = tuple(
            _truncate(self._completion(text, settings, i), settings) for i in range(settings.n)
        )
        return Completion(
            id=request.id,
            generation=Generation(
                texts=texts,
                prompt_tokens=len(text.split()),
                completion_tokens=tuple(len(t.split()) for t in texts),
                steps=tuple(_steps(t, request.top_logprobs) for t in texts)
                if request.top_logprobs
                else (),
                tool_calls=tuple(self._calls(t, request) for t in texts) if request.tools else (),
            ),
        )

    def _calls(self, text: str, request: Request) -> ToolCalls:
        """The calls of one completion, read from its answer (after any reasoning)."""
        answer = split(text, self.preset.reasoning_parser).answer
        if request.tool_choice == "none":
            return ToolCalls(content=answer)
        if request.tool_choice != "auto":
            return read_forced(answer, request.tool_choice)
        calls, unparsed = [], ""
        for body in _CALL.findall(answer):
            try:
                call = json.loads(body)
                calls.append(ToolCall(name=call["name"], arguments=json.dumps(call["arguments"])))
            except (ValueError, KeyError, TypeError) as exc:
                unparsed = f"<tool_call>{body}</tool_call> is not a call ({exc!r})"
        return ToolCalls(
            calls=tuple(calls), content=_CALL.sub("", answer).strip(), unparsed=unparsed
        )

    def _loglikelihood(self, text: str, continuation: str) -> Loglikelihood:
        """A scripted completion that starts with the continuation scores 0 (the likeliest, and
        greedy); anything else a stable hash-derived log-probability in (-10, -0.01]."""
        scripted = next((c for k, c in self.script.items() if k in text), None)
        if scripted is not None and scripted.strip().startswith(continuation.strip()):
            logprob = 0.0
        else:
            digest = hashlib.sha256(f"{text}\0{continuation}".encode()).hexdigest()
            logprob = -(1 + int(digest[:8], 16) % 1000) / 100
        return Loglikelihood(
            logprob=logprob,
            tokens=len(continuation.split()),
            prompt_tokens=len(text.split()),
            is_greedy=logprob == 0.0,  # only the scripted continuation is the likeliest
        )

    def _completion(self, text: str, settings: SamplingSettings, index: int) -> str:
        for key, completion in self.script.items():
            if key in text:
                return completion
        # Greedy decoding gives the same text for all n; sampling varies with seed and index.
        salt = "" if settings.temperature == 0 else f"\0{settings.seed}\0{index}"
        digest = hashlib.sha256((text + salt).encode("utf-8")).hexdigest()
        return f"The answer is {int(digest[:8], 16) % 10}."

    def _check_open(self) -> None:
        if self.closed:
            raise EngineError("The fake engine was used after close().")

    def describe(self) -> dict[str, Any]:
        return {
            "backend": "fake",
            "model": self.preset.model,
            "engine_kwargs": {},
            "delay_s": self.delay_s,
            "scripted_keys": sorted(self.script),
            "sampling": self.sampling.to_list(),
            "versions": {"evalpipe": __version__},
        }

    def close(self) -> None:
        self.closed = True
        self.abort()


# A call as hermes writes it, which the fake engine's scripts use.
_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def _hashed(*parts: object) -> int:
    return int(hashlib.sha256("\0".join(map(str, parts)).encode()).hexdigest()[:8], 16)


def _steps(text: str, top: int) -> tuple[TokenStep, ...]:
    """Stable made-up steps: each word a token (id from its hash), the likeliest at its
    position, followed by `top - 1` less likely ones."""
    steps = []
    for position, word in enumerate(text.split()):
        token = _hashed(word) % 50_000
        logprob = -(_hashed(word, position) % 100) / 100
        ranked = [(token, logprob)]
        for rank in range(1, top):
            logprob -= 0.01 + _hashed(word, position, rank) % 300 / 100
            ranked.append(((token + rank) % 50_000, logprob))
        steps.append(TokenStep(token=token, logprob=ranked[0][1], top=tuple(ranked)))
    return tuple(steps)


def _truncate(text: str, settings: SamplingSettings) -> str:
    """Apply stop strings and max_tokens (in words) the way a real engine would cut output."""
    cuts = [text.index(stop) for stop in settings.stop if stop and stop in text]
    if cuts:
        text = text[: min(cuts)]
    words = text.split(" ")
    return " ".join(words[: settings.max_tokens]) if len(words) > settings.max_tokens else text
