"""The endpoint engine: a model behind an OpenAI-compatible server (`--backend openai`), driven
through the same Engine interface as the in-process one.

Requests run on an asyncio loop in a background thread (httpx), at most `concurrency` HTTP
calls at once; `step` hands back whatever finished, so the streaming loop, checkpointing,
resume and scoring are unchanged. Each call is retried on 429/5xx/timeouts/broken connections
(evalpipe.engine.http). Multiple choice by log-probabilities renders the chat template here,
with the model's own tokenizer, and reads the options' prompt log-probabilities through the
completions API (`echo` + `logprobs`): one call per option.

The API key comes from the environment variable the endpoint block names; it lives in the
client's headers only, never in describe(), messages or files.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import json
import logging
import os
import queue
import random
import threading
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from evalpipe.catalog import weights
from evalpipe.catalog.preset import Preset
from evalpipe.core.errors import ConfigError, EngineError, EvalpipeError, MissingDependencyError
from evalpipe.engine import contextfit, rendering
from evalpipe.engine.http import HttpStatusError, RetryPolicy, Tally, request_json
from evalpipe.engine.protocol import Engine, EngineSettings
from evalpipe.records.completion import Completion, Generation, Loglikelihood
from evalpipe.records.device import REMOTE_DEVICE
from evalpipe.records.prompt import Prompt, messages
from evalpipe.records.reasoning import joined
from evalpipe.records.refusal import Refusal
from evalpipe.records.request import Request
from evalpipe.records.sampling import SamplingSettings
from evalpipe.records.tools import ToolCall, ToolCalls

log = logging.getLogger(__name__)
T = TypeVar("T")

# The statuses with which a server refuses one request for what it asks (an over-long prompt
# above all: vLLM answers 400): that sample fails, the run goes on.
REQUEST_REFUSED = (400, 413, 422)

# Seconds `step` waits for a finished request before it returns empty-handed, so the runner
# looks at its stop flag at least this often.
STEP_WAIT_S = 0.25


def api_key(preset: Preset) -> str | None:
    """The key from the variable the endpoint block names (None when it names none)."""
    name = preset.endpoint.api_key_env
    if name is None:
        return None
    key = os.environ.get(name, "")
    if not key:
        raise ConfigError(
            f"--api-key-env {name}: the variable {name} is not set (or empty) in this "
            f"environment. Export it first (export {name}=...), or drop --api-key-env for a "
            "server without a key."
        )
    return key


def sampling_fields(settings: SamplingSettings) -> dict[str, Any]:
    """Every sampling field of a request, spelled out: a vLLM server fills the fields a request
    leaves out from the model's generation_config.json, which the in-process engine does not
    (vLLM's extensions top_k, min_p, repetition_penalty, ignore_eos and skip_special_tokens
    included)."""
    fields: dict[str, Any] = {
        "max_tokens": settings.max_tokens,
        "temperature": settings.temperature,
        "top_p": settings.top_p,
        "n": settings.n,
        "stop": list(settings.stop),
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "top_k": settings.top_k,
        "min_p": settings.min_p,
        "repetition_penalty": 1.0,
        "ignore_eos": settings.ignore_eos,
        "skip_special_tokens": settings.skip_special_tokens,
    }
    if settings.temperature > 0:  # as in-process: a per-request seed only when sampling
        fields["seed"] = settings.seed
    return fields


def tool_fields(request: Request) -> dict[str, Any]:
    """A chat request's OpenAI `tools`, `tool_choice` and `response_format` (a json_schema)."""
    fields: dict[str, Any] = {}
    if request.tools:
        fields |= {"tools": list(request.tools), "tool_choice": request.tool_choice}
    if request.json_schema is not None:
        fields["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": request.json_schema, "strict": True},
        }
    return fields


def read_tool_calls(message: dict[str, Any]) -> ToolCalls:
    """The calls of a chat reply's `message.tool_calls` (the server parsed them); a call
    without a function name is recorded as unparsed."""
    calls, unparsed = [], ""
    for call in message.get("tool_calls") or ():
        function = (call or {}).get("function") or {}
        name, arguments = function.get("name"), function.get("arguments")
        if not isinstance(name, str) or not name:
            unparsed = f"the server returned a tool call without a function name: {call!r}"
            continue
        if not isinstance(arguments, str):  # some servers send an object
            arguments = json.dumps(arguments if arguments is not None else {})
        calls.append(ToolCall(name=name, arguments=arguments))
    return ToolCalls(calls=tuple(calls), content=message.get("content") or "", unparsed=unparsed)


def split_tokens(total: int, n: int) -> tuple[int, ...]:
    """`usage.completion_tokens` (all n choices together) as n per-choice counts that add up."""
    base, extra = divmod(total, n)
    return tuple(base + (i < extra) for i in range(n))


class EndpointEngine(Engine):
    """Engine implementation over HTTP; capacity is the endpoint's concurrency."""

    backend = "openai"

    def __init__(self, preset: Preset, *, key: str | None) -> None:
        endpoint = preset.endpoint
        if endpoint.base_url is None:
            raise ConfigError(
                f"The openai backend needs the server's URL for preset {preset.name!r}: pass "
                "--base-url http://HOST:PORT/v1 or set endpoint.base_url in the preset."
            )
        try:
            import httpx
        except ImportError as exc:
            raise MissingDependencyError(
                f"The openai backend needs httpx ({exc}). Install it with "
                "pip install 'evalpipe[endpoint]'."
            ) from exc
        self.preset = preset
        self.endpoint = endpoint
        self.base_url = endpoint.base_url.rstrip("/")
        self.model = endpoint.model or preset.model
        self.api = endpoint.api_for(preset.chat)
        self.tally = Tally()
        self._policy = RetryPolicy(
            max_retries=endpoint.max_retries,
            timeout_s=endpoint.timeout_s,
            backoff_s=endpoint.backoff_s,
            backoff_max_s=endpoint.backoff_max_s,
        )
        self._rng = random.Random()  # retry jitter
        self._tokenizer: Any = None
        self._futures: dict[str, concurrent.futures.Future[Completion | Exception]] = {}
        self._done: queue.SimpleQueue[tuple[str, concurrent.futures.Future[Any]]] = (
            queue.SimpleQueue()
        )
        self._error: Exception | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="evalpipe-endpoint", daemon=True
        )
        self._thread.start()
        headers = {"Authorization": f"Bearer {key}"} if key else {}

        async def start() -> tuple[Any, asyncio.Semaphore]:
            # The client's pool matches the concurrency: no call waits for a connection.
            limits = httpx.Limits(max_connections=endpoint.concurrency)
            client = httpx.AsyncClient(headers=headers, limits=limits, timeout=endpoint.timeout_s)
            return client, asyncio.Semaphore(endpoint.concurrency)

        self._client, self._slots = self._call(start())
        self.server_models: list[str] = []

    @classmethod
    def open(cls, preset: Preset, settings: EngineSettings) -> EndpointEngine:
        """Connect to the preset's endpoint and check that it serves the model. The layout in
        `settings` is the server's business and is not used here."""
        engine = cls(preset, key=api_key(preset))
        try:
            engine.check_model()
        except BaseException:
            engine.close()
            raise
        return engine

    def _call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def check_model(self) -> None:
        """GET /models: the served model must be among them (the error lists them)."""
        url = f"{self.base_url}/models"
        try:
            data = self._call(self._request("GET", "/models", None))
        except HttpStatusError as exc:
            if exc.status == 404:  # a gateway without a model list: the first request tells
                log.warning("%s answers 404; not checking the model name %r.", url, self.model)
                return
            raise self._refused(exc) from None
        except EngineError as exc:
            raise EngineError(
                f"No OpenAI-compatible server answers at {self.base_url}: {exc}"
            ) from None
        self.server_models = [str(m.get("id")) for m in data.get("data") or []]
        if self.model not in self.server_models:
            raise ConfigError(
                f"The server at {self.base_url} does not serve model {self.model!r}; it serves: "
                f"{', '.join(self.server_models) or 'nothing'}. Pass --model NAME (or set "
                "endpoint.model in the preset) to one of them."
            )

    def _refused(self, exc: HttpStatusError) -> EvalpipeError:
        """A 4xx answer as the error a user can act on."""
        if exc.status in (401, 403):
            return ConfigError(
                f"The server at {self.base_url} refused the request (HTTP {exc.status}: "
                f"{exc.detail}). Put a valid key in the variable named by --api-key-env "
                f"(now {self.endpoint.api_key_env or 'none'})."
            )
        if exc.status == 404 and "model" in exc.detail.lower():
            return ConfigError(
                f"The server at {self.base_url} does not know model {self.model!r} "
                f"({exc.detail}); it serves: {', '.join(self.server_models) or 'unknown'}. "
                "Pass --model NAME to one of them."
            )
        return exc

    # -- the Engine interface ----------------------------------------------------------------

    @property
    def capacity(self) -> int:
        return self.endpoint.concurrency

    def add(self, requests: Sequence[Request]) -> None:
        for request in requests:
            if request.id in self._futures:
                raise EngineError(f"Request id {request.id!r} is already in flight.")
            if request.top_logprobs:
                # OpenAI-compatible APIs name tokens by their text, not their ids.
                raise ConfigError(
                    f"Request {request.id!r} asks for top_logprobs={request.top_logprobs}, "
                    f"which the {self.backend} backend cannot give (its API returns no token "
                    "ids); use the vllm or fake backend."
                )
            # Rendering with the local tokenizer happens here, in the caller's thread.
            work = _settled(self._work(request))
            future = asyncio.run_coroutine_threadsafe(work, self._loop)
            self._futures[request.id] = future
            future.add_done_callback(lambda f, rid=request.id: self._done.put((rid, f)))

    def ready(self) -> bool:
        return self._error is not None or not self._done.empty()

    def step(self) -> list[Completion]:
        """The requests that finished since the last step (waits up to STEP_WAIT_S for one).
        A request that failed for good raises, after the ones finished beside it came back."""
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        if not self._futures:
            return []
        try:
            batch = [self._done.get(timeout=STEP_WAIT_S)]
        except queue.Empty:
            return []
        while not self._done.empty():
            batch.append(self._done.get_nowait())
        finished = []
        for rid, future in batch:
            if self._futures.get(rid) is not future:  # aborted meanwhile
                continue
            del self._futures[rid]
            result = future.result()
            if isinstance(result, Completion):
                finished.append(result)
            else:
                self._error = self._error or result
        if self._error is not None and not finished:
            error, self._error = self._error, None
            raise error
        return finished

    def in_flight(self) -> int:
        return len(self._futures)

    def abort(self) -> list[str]:
        """Cancel every request in flight: their connections close, and a vLLM server aborts
        a request whose client has gone."""
        ids = list(self._futures)
        for future in self._futures.values():
            future.cancel()
        self._futures.clear()
        return ids

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        self.abort()
        self._call(self._client.aclose())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def describe(self) -> dict[str, Any]:
        """Where the model was served and what the calls cost; never the key itself."""
        return {
            "backend": self.backend,
            "preset": self.preset.name,
            "model": self.model,
            "base_url": self.base_url,
            "api": self.api,
            "api_key_env": self.endpoint.api_key_env,
            "concurrency": self.endpoint.concurrency,
            "timeout_s": self.endpoint.timeout_s,
            "max_retries": self.endpoint.max_retries,
            "server_models": self.server_models,
            "device": REMOTE_DEVICE,
            "http_calls": self.tally.calls,
            "retries": dict(self.tally.retries),
        }

    # -- requests ----------------------------------------------------------------------------

    def _work(self, request: Request) -> Coroutine[Any, Any, Completion]:
        if request.sampling is None:
            encoded = rendering.encode_options(
                self._tokenizer_here(),
                request.prompt,
                request.continuations,
                chat=self.preset.chat,
                preset=self.preset.name,
                template_kwargs=self.preset.chat_template_kwargs,
            )
            return self._score(request.id, encoded)
        if self.api == "chat":
            body: dict[str, Any] = {"messages": messages(request.prompt)} | tool_fields(request)
            if self.preset.chat_template_kwargs:
                body["chat_template_kwargs"] = dict(self.preset.chat_template_kwargs)
        elif request.tools:
            raise ConfigError(
                f"Request {request.id!r} offers tools, which the endpoint engine sends through "
                f"the chat API only; preset {self.preset.name!r} uses the completions API. "
                "Set endpoint.api: chat."
            )
        elif self.preset.chat:  # the completions API continues the template rendered here
            body = {"prompt": self._render(request.prompt)[1]}
        else:
            body = {"prompt": rendering.plain_text(request.prompt, preset=self.preset.name)}
        if self.api != "chat" and request.json_schema is not None:
            body["structured_outputs"] = {"json": request.json_schema}  # vLLM's extension
        return self._generate(
            request.id, body, request.sampling, request.prompt, tools=bool(request.tools)
        )

    async def _generate(
        self,
        rid: str,
        body: dict[str, Any],
        settings: SamplingSettings,
        prompt: Prompt,
        *,
        tools: bool = False,
    ) -> Completion:
        path = "/chat/completions" if self.api == "chat" else "/completions"
        try:
            data = await self._request("POST", path, body | sampling_fields(settings))
        except HttpStatusError as exc:
            if exc.status not in REQUEST_REFUSED:
                raise
            refusal = contextfit.refusal_of(f"HTTP {exc.status}: {exc.detail}")
            if refusal.reason == "context_overflow" and refusal.prompt_tokens is None:
                refusal = dataclasses.replace(refusal, prompt_tokens=self._count(prompt))
            return Completion(id=rid, refusal=refusal)
        choices = sorted(data.get("choices") or [], key=lambda c: c.get("index", 0))
        if len(choices) != settings.n:
            raise EngineError(
                f"{self.base_url}{path} returned {len(choices)} choice(s) for request {rid!r}; "
                f"n={settings.n} were asked for."
            )
        calls: tuple[ToolCalls, ...] = ()
        if self.api == "chat":
            texts = tuple(self._text(c) for c in choices)
            if tools:
                calls = tuple(read_tool_calls(c.get("message") or {}) for c in choices)
        else:
            texts = tuple(c.get("text") or "" for c in choices)
        usage = data.get("usage") or {}
        generated = int(usage.get("completion_tokens") or 0)
        return Completion(
            id=rid,
            generation=Generation(
                texts=texts,
                prompt_tokens=int(usage.get("prompt_tokens") or 0),
                completion_tokens=split_tokens(generated, len(texts)),
                tool_calls=calls,
            ),
        )

    def _text(self, choice: dict[str, Any]) -> str:
        """A chat answer's text; reasoning the server kept apart (vLLM's --reasoning-parser) is
        put back in the form the preset's reasoning parser splits, so it is kept, not scored.
        No answer and a `length` finish: it stopped inside its reasoning (cut off)."""
        message = choice.get("message") or {}
        reasoning = message.get("reasoning") or message.get("reasoning_content")
        answer = message.get("content") or None
        if answer is None and choice.get("finish_reason") != "length":
            answer = ""
        return joined(reasoning, answer, self.preset.reasoning_parser)

    async def _score(self, rid: str, encoded: list[tuple[list[int], int]]) -> Completion:
        try:
            scored = await asyncio.gather(*(self._option(ids, start) for ids, start in encoded))
        except _Overflow as exc:
            return Completion(id=rid, refusal=exc.refusal)
        return Completion(id=rid, loglikelihoods=tuple(scored))

    async def _option(self, ids: list[int], start: int) -> Loglikelihood:
        """log p(ids[start:] | ids[:start]) from the prompt log-probabilities the completions
        API returns with echo (nothing is generated)."""
        body = {
            "prompt": ids,
            "max_tokens": 0,
            "echo": True,
            "logprobs": 1,
            "temperature": 0.0,
        }
        try:
            data = await self._request("POST", "/completions", body)
        except HttpStatusError as exc:
            refusal = contextfit.refusal_of(f"HTTP {exc.status}: {exc.detail}")
            if exc.status in REQUEST_REFUSED and refusal.reason == "context_overflow":
                raise _Overflow(refusal) from None
            raise EngineError(
                f"{self.base_url} refused a log-probability request (HTTP {exc.status}: "
                f"{exc.detail}). Multiple choice by log-probabilities needs the completions "
                "API with echo and logprobs (vLLM serves it); use --mc-method generate for "
                "this server."
            ) from None
        choices = data.get("choices") or [{}]
        token_logprobs = (choices[0].get("logprobs") or {}).get("token_logprobs")
        if not isinstance(token_logprobs, list) or len(token_logprobs) < len(ids):
            raise EngineError(
                f"{self.base_url}/completions did not return the prompt's log-probabilities "
                "(echo with logprobs). Multiple choice by log-probabilities needs them; use "
                "--mc-method generate for this server."
            )
        values = [float(v) for v in token_logprobs[start : len(ids)]]
        return Loglikelihood.of(values, prompt_tokens=start, source=self.base_url)

    async def _request(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
        if body is not None:
            body = {"model": self.model, **body}
        async with self._slots:
            try:
                return await request_json(
                    self._client,
                    method,
                    self.base_url + path,
                    body=body,
                    policy=self._policy,
                    tally=self.tally,
                    rng=self._rng,
                )
            except HttpStatusError as exc:
                raise self._refused(exc) from None

    # -- the local tokenizer (option scoring, completions API for chat presets) ---------------

    def _render(self, prompt: Prompt) -> tuple[str, list[int]]:
        return rendering.render(
            self._tokenizer_here(),
            prompt,
            chat=self.preset.chat,
            preset=self.preset.name,
            template_kwargs=self.preset.chat_template_kwargs,
        )

    def _count(self, prompt: Prompt) -> int | None:
        """The prompt's tokens with the preset's tokenizer, for a refusal whose server counted
        characters only; None where the tokenizer cannot be had here."""
        try:
            return len(self._render(prompt)[1])
        except EvalpipeError:
            return None

    def _tokenizer_here(self) -> Any:
        if self._tokenizer is None:
            source = weights.model_source(self.preset)
            try:
                from transformers import AutoTokenizer
            except ImportError as exc:
                raise MissingDependencyError(
                    f"Rendering prompts for {self.base_url} needs transformers ({exc}). "
                    "Install it with pip install 'evalpipe[endpoint]'."
                ) from exc
            try:
                self._tokenizer = AutoTokenizer.from_pretrained(source)
            except (OSError, ValueError) as exc:
                raise EngineError(
                    f"Cannot load the tokenizer of preset {self.preset.name!r} from {source!r} "
                    f"({exc}). Multiple choice by log-probabilities and the completions API of "
                    "a chat preset render the prompt here: make the model folder (or its "
                    "tokenizer files) available, or use --mc-method generate."
                ) from None
        return self._tokenizer


class _Overflow(Exception):
    """An option's scoring request outgrew the server's context: its sample fails."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.detail)
        self.refusal = refusal


async def _settled(work: Coroutine[Any, Any, Completion]) -> Completion | Exception:
    """The request's completion or its failure as a value, for `step` to raise in the runner's
    thread (a failure left in the task would be reported as never retrieved once aborted)."""
    try:
        return await work
    except Exception as exc:
        return exc
