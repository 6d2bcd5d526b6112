"""The real engine: `vllm.LLM` built from a preset, with the OOM ladder around build and generate.

vLLM (and torch) are imported only when an engine is opened, so the CLI's planning and
submission commands never pay for them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import importlib
import json
import os
import time
import weakref
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalpipe.catalog import weights
from evalpipe.catalog.preset import DTYPE_BYTES, Preset
from evalpipe.core import provenance
from evalpipe.core.configio import suggest
from evalpipe.core.errors import ConfigError, EngineError, EvalpipeError, MissingDependencyError
from evalpipe.engine import contextfit, rendering
from evalpipe.engine.fallback import (
    Context,
    Ladder,
    bitsandbytes_supported,
    fp8_kv_cache_supported,
    fp8_weights_supported,
)
from evalpipe.engine.protocol import Engine, EngineSettings, Room, SeenSampling, Slots
from evalpipe.engine.toolcalls import ToolReader
from evalpipe.records.completion import Completion, Generation, Loglikelihood, TokenStep
from evalpipe.records.prompt import Prompt, Rendered
from evalpipe.records.refusal import Refusal, overflow
from evalpipe.records.request import Request
from evalpipe.records.sampling import SamplingSettings

# LLM() arguments evalpipe fills from the preset's own keys or the run's options; setting them in
# engine_kwargs too would be ambiguous, so it is refused with the key to use instead.
RESERVED = {
    "model": "model",
    "revision": "revision",
    "tensor_parallel_size": "tensor_parallel (or --tp)",
    "pipeline_parallel_size": "pipeline_parallel (or --pp)",
    "distributed_executor_backend": "--distributed-executor-backend",
    "dtype": "dtype",
    "quantization": "quantization",
    "kv_cache_dtype": "kv_cache_dtype",
    "max_model_len": "max_model_len (or --max-model-len)",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "seed": "seed",
}

# On the CPU build, vLLM otherwise reserves gpu_memory_utilization × the NUMA node's memory for
# the KV cache and refuses to start when the node reports less free memory (common in VMs).
# evalpipe sizes it instead: room for CPU_KV_SEQUENCES full-length sequences (more do not run
# faster on a few cores), at most CPU_KV_CACHE_MAX. Allocating it is part of every build.
CPU_KV_SEQUENCES = 32
CPU_KV_CACHE_MAX = 1 << 30


def cpu_kv_cache_bytes(preset: Preset, max_model_len: int) -> int:
    """The default CPU KV cache size for a preset (K and V, every layer, model dtype)."""
    arch = preset.architecture
    per_token = 2 * arch.layers * arch.kv_heads * arch.head_dim * DTYPE_BYTES[preset.dtype]
    return int(min(CPU_KV_CACHE_MAX, per_token * max_model_len * CPU_KV_SEQUENCES))


def import_vllm() -> Any:
    """The vllm module, or MissingDependencyError saying which extra installs it."""
    try:
        import vllm
    except ImportError as exc:
        raise MissingDependencyError(
            f"The vllm backend needs vLLM, which cannot be imported ({exc}). Install it with "
            "pip install 'evalpipe[gpu]' on a GPU machine, or pip install 'evalpipe[cpu]' "
            "(then scripts/setup.sh's clean-up steps) on a CPU-only one."
        ) from exc
    return vllm


def engine_arg_names() -> frozenset[str]:
    """The keyword arguments the installed vLLM's EngineArgs accepts."""
    import_vllm()
    from vllm.engine.arg_utils import EngineArgs

    return frozenset(f.name for f in dataclasses.fields(EngineArgs))


def check_engine_kwargs(
    engine_kwargs: Mapping[str, Any], valid: Collection[str], *, where: str
) -> None:
    """Refuse keys vLLM does not know (with the nearest ones) and keys evalpipe sets itself."""
    for key in engine_kwargs:
        if key in RESERVED:
            raise ConfigError(
                f"{where}: engine_kwargs.{key} is set by evalpipe; use the preset key "
                f"{RESERVED[key]} instead."
            )
        if key not in valid:
            raise ConfigError(
                f"{where}: engine_kwargs.{key} is not an argument of vLLM's EngineArgs."
                f"{suggest(key, valid)} See https://docs.vllm.ai/en/latest/configuration/"
                "engine_args/ for the valid ones."
            )


def llm_kwargs(preset: Preset, settings: EngineSettings, model_path: str) -> dict[str, Any]:
    """The LLM() keyword arguments for a preset under the given engine settings."""
    kwargs: dict[str, Any] = {
        "model": model_path,
        # A revision names a hub commit; a local or prepared folder has none.
        "revision": None if Path(model_path).is_dir() else preset.revision,
        "tensor_parallel_size": settings.tensor_parallel_size,
        "pipeline_parallel_size": settings.pipeline_parallel_size,
        "dtype": preset.dtype,
        "quantization": None if preset.quantization == "none" else preset.quantization,
        "kv_cache_dtype": preset.kv_cache_dtype,
        "max_model_len": settings.max_model_len or preset.max_model_len,
        "gpu_memory_utilization": settings.gpu_memory_utilization or preset.gpu_memory_utilization,
        "seed": preset.seed,
    }
    if settings.distributed_executor_backend is not None:
        kwargs["distributed_executor_backend"] = settings.distributed_executor_backend
    if preset.reasoning_parser is not None:
        # A request's json_schema then constrains the answer after the reasoning only: without
        # the parser the grammar applies from the first token and suppresses the thinking.
        kwargs["structured_outputs_config"] = {"reasoning_parser": preset.reasoning_parser}
    kwargs = {**kwargs, **preset.engine_kwargs}
    rope = rope_overrides(preset, kwargs["max_model_len"])
    if rope:
        kwargs["hf_overrides"] = {**(preset.engine_kwargs.get("hf_overrides") or {}), **rope}
    return kwargs


def rope_overrides(preset: Preset, max_model_len: int) -> dict[str, Any]:
    """The model-config overrides that give vLLM the preset's rope scaling, for a run longer
    than the model's native context; {} otherwise (the model cards add YaRN only for long
    contexts: it is static in vLLM and may lower scores on short texts).

    vLLM 0.32 has no rope-scaling engine argument: it is hf_overrides. A dict there replaces
    config.json's rope parameters whole after vLLM has filled in rope_theta, hence rope_theta
    in the block. vLLM also takes a YaRN config's max_position_embeddings as already scaled
    (_get_and_verify_max_len multiplies by `factor` for other rope types only) and refuses a
    longer max_model_len, so the scaled length is set there too.
    """
    scaling = preset.architecture.rope_scaling
    if scaling is None or max_model_len <= preset.architecture.native_context:
        return {}
    return {
        # Transformers 5 reads rope_scaling into rope_parameters; before 5 it is the name.
        "rope_scaling": {
            "rope_type": scaling.rope_type,
            "factor": float(scaling.factor),
            "original_max_position_embeddings": scaling.original_max_position_embeddings,
            "rope_theta": float(scaling.rope_theta),
        },
        "max_position_embeddings": scaling.max_length,
    }


def env_defaults(
    environ: Mapping[str, str], *, cpu: bool, oom_fallback: bool, deterministic: bool
) -> dict[str, str]:
    """The vLLM environment evalpipe relies on that `environ` does not set already.

    VLLM_ENABLE_V1_MULTIPROCESSING=0 keeps vLLM's engine core in this process: its failures (out
    of memory above all) then reach the OOM ladder as exceptions instead of "see root cause
    above", and on the CPU LLM() builds in seconds instead of a minute.
    VLLM_BATCH_INVARIANT=1 (deterministic runs) where this vLLM has it and the platform is not
    the CPU build, whose 0.32 crashes at start-up with it.
    """
    wanted = {}
    if cpu or oom_fallback:
        wanted["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    if deterministic and not cpu and batch_invariance_available():
        wanted["VLLM_BATCH_INVARIANT"] = "1"
    return {k: v for k, v in wanted.items() if k not in environ}


def batch_invariance_available() -> bool:
    """Whether the installed vLLM has batch-invariant kernels (VLLM_BATCH_INVARIANT)."""
    import vllm.envs

    return "VLLM_BATCH_INVARIANT" in getattr(vllm.envs, "environment_variables", {})


def _cpu_kv_default(preset: Preset, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """kv_cache_memory_bytes to add on the CPU, unless the user sized the KV cache already."""
    in_env = bool(os.environ.get("VLLM_CPU_KVCACHE_SPACE"))
    in_kwargs = kwargs.get("kv_cache_memory_bytes") is not None
    if in_env and in_kwargs:
        raise ConfigError(
            f"Preset {preset.name!r} sets engine_kwargs.kv_cache_memory_bytes and the "
            "environment sets VLLM_CPU_KVCACHE_SPACE; vLLM would silently use the "
            "environment's. Unset one of them."
        )
    if in_env or in_kwargs:
        return {}
    return {"kv_cache_memory_bytes": cpu_kv_cache_bytes(preset, kwargs["max_model_len"])}


# vLLM's step budget (max_num_batched_tokens) for the LLM class on the CPU (its EngineArgs).
CPU_STEP_TOKENS = 4096


def _cpu_whole_prefills(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Chunked prefill off on the CPU, unless the preset sets the step budget itself.

    vLLM 0.32's runner rewinds a seeded request's random generator when the request's prefill
    is split across steps (`gen.set_offset(gen.get_offset() - 4)`), which only CUDA generators
    allow: on the CPU a seeded sample (AIME's temperature 0.6 with a seed) whose prompt lands
    at the end of a step's budget fails the run with "CPU Generator does not use offset".
    Whole prefills never split; the budget must then hold the longest prompt.
    """
    if "enable_chunked_prefill" in kwargs or "max_num_batched_tokens" in kwargs:
        return {}
    return {
        "enable_chunked_prefill": False,
        "max_num_batched_tokens": max(kwargs["max_model_len"], CPU_STEP_TOKENS),
    }


def engine_kwargs(
    preset: Preset, settings: EngineSettings
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(model path, vLLM engine arguments, the CPU defaults among them) for a preset: what the
    in-process engine builds `LLM` with and `evalpipe serve` starts `vllm serve` with."""
    import_vllm()
    from vllm.platforms import current_platform

    where = f"preset {preset.name!r}"
    check_engine_kwargs(preset.engine_kwargs, engine_arg_names(), where=where)
    model_path = weights.model_source(preset)
    kwargs = llm_kwargs(preset, settings, model_path)
    cpu_defaults = (
        {**_cpu_kv_default(preset, kwargs), **_cpu_whole_prefills(kwargs)}
        if current_platform.is_cpu()
        else {}
    )
    kwargs.update(cpu_defaults)
    return model_path, kwargs, cpu_defaults


def _device_name(platform: Any) -> str:
    if platform.is_cpu():
        return f"cpu ({provenance.cpu_model()}, {os.cpu_count()} cores)"
    return str(platform.get_device_name())


# Engines alive in this process. vLLM keeps its parallel groups in process-wide globals, shared by
# every in-process engine: they may only be torn down once no engine is left.
_LIVE: weakref.WeakSet[VllmEngine] = weakref.WeakSet()


# A closed engine whose memory has not been released yet. Release (gc + vLLM's process-wide
# teardown, ~0.9 s on the CPU) is only needed before another engine is built in this process,
# so `close()` leaves it to the next `open()`; a run that ends simply exits.
_UNRELEASED = False


@contextlib.contextmanager
def _groups_kept_while(live: Collection[object]) -> Iterator[None]:
    """Keep vLLM's process-wide parallel groups while `live` engines still use them: an
    in-process EngineCore's shutdown tears them down (vLLM 0.32), which would break every
    other engine of the process at its next step."""
    core = importlib.import_module("vllm.v1.engine.core")
    teardown = getattr(core, "cleanup_dist_env_and_memory", None)
    if not live or teardown is None:
        yield
        return
    core.cleanup_dist_env_and_memory = lambda *args, **kwargs: None
    try:
        yield
    finally:
        core.cleanup_dist_env_and_memory = teardown


def _release_memory() -> None:
    """Free what a closed or failed engine held, so the next one can be built in this process."""
    global _UNRELEASED
    _UNRELEASED = False
    gc.collect()
    if not _LIVE:
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

        cleanup_dist_env_and_memory()


class VllmEngine(Engine):
    """One loaded model driven through vLLM's engine loop (`LLMEngine.add_request` / `step` /
    `abort_request`, present across the supported vLLM range). Build it with
    `VllmEngine.open`; `close()` frees it."""

    backend = "vllm"

    def __init__(
        self,
        *,
        preset: Preset,
        model_path: str,
        ladder: Ladder,
        env_defaults: Mapping[str, str],
        cpu_defaults: Mapping[str, Any],
        device: str,
    ) -> None:
        self.preset = preset
        self.model_path = model_path
        self._ladder = ladder
        self._env_defaults = dict(env_defaults)
        self._cpu_defaults = dict(cpu_defaults)
        self._device = device
        self._llm: Any = None
        self._tools: ToolReader | None = None  # the preset's tool-call parser, once built
        self._pending: dict[str, Request] = {}  # admitted, not yet returned
        self._scoring: dict[str, _Scoring] = {}  # option-scoring requests' parts in flight
        self._refused: list[Completion] = []  # refused at admission, returned by the next step
        self._sampling = SeenSampling()
        self._busy = 0  # sequences in the last step
        self._preempted = 0  # sequences the last step preempted
        self.builds = 0
        self.build_s = 0.0

    @classmethod
    def open(cls, preset: Preset, settings: EngineSettings) -> VllmEngine:
        """Resolve the model, validate engine_kwargs and build the engine (stepping down on OOM)."""
        model_path, kwargs, cpu_defaults = engine_kwargs(preset, settings)  # imports vLLM
        from vllm.platforms import current_platform

        cpu = bool(current_platform.is_cpu())
        # On the CPU the KV cache size is always fixed: by the environment or by kwargs.
        kv_fixed = cpu or kwargs.get("kv_cache_memory_bytes") is not None
        applied_env = env_defaults(
            os.environ,
            cpu=cpu,
            oom_fallback=settings.oom_fallback,
            deterministic=settings.deterministic,
        )
        os.environ.update(applied_env)
        context = Context(
            min_model_len=settings.min_model_len,
            kv_budget_fixed=kv_fixed,
            fp8_weights=fp8_weights_supported(),
            bnb_4bit=bitsandbytes_supported(),
            fp8_kv=fp8_kv_cache_supported(),
            native_context=preset.architecture.native_context,
        )
        ladder = Ladder(
            kwargs, context=context, enabled=settings.oom_fallback, subject=f"preset {preset.name}"
        )
        engine = cls(
            preset=preset,
            model_path=model_path,
            ladder=ladder,
            env_defaults=applied_env,
            cpu_defaults=cpu_defaults,
            device=_device_name(current_platform),
        )
        if _UNRELEASED:
            _release_memory()
        engine._build()
        try:  # a tool parser that refuses the model's tokenizer fails the run before any request
            engine._tools = ToolReader(
                preset.tool_parser,
                engine._open_llm().get_tokenizer(),
                preset=preset.name,
                reasoning_parser=preset.reasoning_parser,
            )
        except ConfigError:
            engine.close()
            raise
        return engine

    def _build(self) -> None:
        """Build LLM() with the ladder's current kwargs; on a memory failure step down and retry."""
        from vllm import LLM

        while True:
            start = time.monotonic()
            try:
                self._llm = LLM(**self._ladder.kwargs)
            except Exception as exc:
                self._ladder.recover(exc, "build")  # raises EngineError when out of steps
            else:
                self._ladder.succeeded()
                _LIVE.add(self)
                return
            finally:
                self.builds += 1
                self.build_s += time.monotonic() - start
            # Outside the except block, so the failed engine's frames are no longer referenced.
            _release_memory()

    @property
    def fallback_steps(self) -> list[str]:
        return list(self._ladder.steps)

    @property
    def capacity(self) -> int:
        """Twice vLLM's max_num_seqs: a full batch and as many queued, so a finished sequence's
        place is taken at the next step (no drain at any boundary)."""
        config = self._open_llm().llm_engine.vllm_config
        return 2 * int(config.scheduler_config.max_num_seqs)

    def add(self, requests: Sequence[Request]) -> None:
        """Admit requests to vLLM's engine loop (`LLMEngine.add_request`)."""
        for request in requests:
            if request.id in self._pending:
                raise EngineError(f"Request id {request.id!r} is already in flight.")
            refusal = self._submit(request)  # a request vLLM refuses is not left pending
            if refusal is None:
                self._pending[request.id] = request
            else:  # that sample fails, not the run
                self._refused.append(Completion(id=request.id, refusal=refusal))

    def step(self) -> list[Completion]:
        """One step of vLLM's engine loop; on a memory failure step down the ladder, rebuild
        and admit everything in flight again. Requests refused at admission come back first."""
        refused, self._refused = self._refused, []
        if not self._pending:
            return refused
        scheduler = self._scheduler()
        # Only a running sequence can be preempted; vLLM counts it on the request itself.
        running = list(scheduler.running) if scheduler is not None else []
        before = sum(r.num_preemptions for r in running)
        self._preempted = 0  # a step that rebuilds the engine reports none
        try:
            outputs = self._open_llm().llm_engine.step()
        except EvalpipeError:
            raise
        except Exception as exc:
            self._ladder.recover(exc, "generate")  # raises EngineError when out of steps
            self._rebuild()
            return refused
        done = refused
        for out in outputs:
            if out.finished:
                completion = self._finish(out)
                if completion is not None:
                    done.append(completion)
        if scheduler is not None:  # those still running, and those that finished in the step
            finished = sum(len(out.outputs) for out in outputs if out.finished)
            self._busy = len(scheduler.running) + finished
            self._preempted = sum(r.num_preemptions for r in running) - before
        return done

    def _scheduler(self) -> Any:
        """vLLM's scheduler when its engine core runs in this process (evalpipe's default:
        VLLM_ENABLE_V1_MULTIPROCESSING=0); None otherwise."""
        core = getattr(self._open_llm().llm_engine.engine_core, "engine_core", None)
        return getattr(core, "scheduler", None)

    def slots(self) -> Slots | None:
        if self._llm is None or self._scheduler() is None:
            return None
        return Slots(busy=self._busy, total=self.room().slots, preempted=self._preempted)

    def room(self) -> Room:
        config = self._open_llm().llm_engine.vllm_config
        cache = config.cache_config
        return Room(
            slots=int(config.scheduler_config.max_num_seqs),
            kv_tokens=int(cache.num_gpu_blocks or 0) * int(cache.block_size),
            block=int(cache.block_size),
        )

    def in_flight(self) -> int:
        return len(self._pending) + len(self._refused)

    def abort(self) -> list[str]:
        """Abort every request in flight (by the ids given to `add_request`)."""
        refused = [c.id for c in self._refused]  # never in vLLM's loop
        self._refused.clear()
        ids = list(self._pending)
        parts = [part for scoring in self._scoring.values() for part in scoring.parts]
        generating = [rid for rid in ids if rid not in self._scoring]
        if self._llm is not None and ids:
            self._llm.llm_engine.abort_request(generating + parts)
        self._pending.clear()
        self._scoring.clear()
        return ids + refused

    def _submit(self, request: Request) -> Refusal | None:
        """Add the request to vLLM's loop, or say why it cannot run: a prompt that leaves no
        room in the context is refused here (counted with evalpipe's own rendering), and so is
        one vLLM's validation rejects."""
        from vllm.inputs import TokensPrompt

        engine = self._open_llm().llm_engine
        if request.sampling is not None:
            _, ids = self._render(request.prompt, request.tools)
            limit = self._context()
            if isinstance(request.prompt, Rendered):
                ids = contextfit.lmeval_generation_ids(ids, limit, request.sampling.max_tokens)
            refusal = overflow(len(ids), limit)
            if refusal is not None:
                return refusal
            tools = self._reader()
            try:
                params = _params(
                    request.sampling,
                    top_logprobs=request.top_logprobs,
                    schema=tools.schema(request),
                    keep_special_tokens=tools.keeps_special_tokens(request),
                )
                engine.add_request(request.id, TokensPrompt(prompt_token_ids=ids), params)
            except _validation_error() as exc:
                return contextfit.refusal_of(str(exc))
            except ValueError as exc:  # a schema the grammar back-end cannot compile
                if tools.schema(request) is None:
                    raise
                return Refusal(reason="refused", detail=f"structured output: {exc}")
            self._sampling.add(_described(params))
            return None
        scoring = self._score_parts(request)
        if isinstance(scoring, Refusal):
            return scoring
        added = []
        try:
            for part, (ids, params) in scoring.requests.items():
                engine.add_request(part, TokensPrompt(prompt_token_ids=ids), params)
                added.append(part)
        except Exception as exc:
            if added:
                engine.abort_request(added)
            if isinstance(exc, _validation_error()):
                return contextfit.refusal_of(str(exc))
            raise
        self._scoring[request.id] = scoring
        return None

    def _context(self) -> int:
        """The loaded engine's context in tokens (prompt and completion together)."""
        return int(self._open_llm().llm_engine.vllm_config.model_config.max_model_len)

    def _score_parts(self, request: Request) -> _Scoring | Refusal:
        """The vLLM requests that score a request's continuations (in the engine's context: a
        rendered lm-eval prompt is cut as lm-eval cuts it, any other that does not fit is
        refused).

        The context is tokenised alone and with each continuation; the continuation's tokens
        are those past the longest common prefix (a merge across the boundary, e.g. ":" + " A",
        counts as continuation). A continuation of up to STEP_TOKENS tokens is read one token at
        a time from single decoding steps (`logprob_token_ids`, where this vLLM has it), one step
        per distinct prefix: options that share a prefix share its step, so four option letters
        cost one prefill of their question (two where the context's trailing whitespace, as
        lm-eval moves it, is the continuation's first token), and the prefix cache can serve the
        rest; no output layer runs over every prompt position as `prompt_logprobs` needs.
        Longer continuations use `prompt_logprobs`. Nothing is detokenised."""
        from vllm import SamplingParams

        encoded = rendering.encode_options(
            self._open_llm().get_tokenizer(),
            request.prompt,
            request.continuations,
            chat=self.preset.chat,
            preset=self.preset.name,
            template_kwargs=self.preset.chat_template_kwargs,
        )
        limit = self._context()
        if isinstance(request.prompt, Rendered):
            encoded = [contextfit.lmeval_scoring_pair(ids, start, limit) for ids, start in encoded]
        for ids, start in encoded:
            refusal = overflow(len(ids), limit)
            if start < 1:  # cut into the continuation itself: nothing left to condition on
                refusal = Refusal(
                    reason="context_overflow",
                    prompt_tokens=len(ids) - start,
                    limit=limit,
                    detail="the continuation alone fills the context",
                )
            if refusal is not None:
                return refusal
        stepwise = _reads_chosen_logprobs()
        scoring = _Scoring(encoded=encoded)
        wanted: dict[tuple[int, ...], set[int]] = {}  # prefix → the tokens read after it
        for i, (ids, start) in enumerate(encoded):
            if stepwise and len(ids) - start <= STEP_TOKENS:
                scoring.steps[i] = [(tuple(ids[:p]), ids[p]) for p in range(start, len(ids))]
                for prefix, token in scoring.steps[i]:
                    wanted.setdefault(prefix, set()).add(token)
            else:
                params = SamplingParams(
                    max_tokens=1, temperature=0.0, prompt_logprobs=0, detokenize=False
                )
                scoring.add(f"{request.id}{PART}p{i}", ids, params, i)
        for n, (prefix, tokens) in enumerate(wanted.items()):
            ordered = sorted(tokens)
            for k in range(0, len(ordered), MAX_STEP_TOKENS):
                params = SamplingParams(
                    max_tokens=1,
                    temperature=0.0,
                    logprob_token_ids=ordered[k : k + MAX_STEP_TOKENS],
                    detokenize=False,
                )
                scoring.add(f"{request.id}{PART}s{n}.{k}", list(prefix), params, prefix)
        return scoring

    def _finish(self, out: Any) -> Completion | None:
        """The completion a finished vLLM request makes, once all its parts are in."""
        rid, sep, _ = out.request_id.partition(PART)
        if not sep:
            request = self._pending.pop(rid, None)
            top = request.top_logprobs if request is not None else 0
            choices = sorted(out.outputs, key=lambda c: c.index)
            failed = any(c.finish_reason == "error" for c in choices)
            if failed and request is not None and request.json_schema is not None:
                # vLLM fails only this request when its grammar does not compile.
                return Completion(id=rid, refusal=_schema_refused(request))
            return Completion(
                id=rid,
                generation=Generation(
                    texts=tuple(c.text for c in choices),
                    prompt_tokens=len(out.prompt_token_ids or ()),
                    completion_tokens=tuple(len(c.token_ids) for c in choices),
                    steps=tuple(_steps(c, top) for c in choices) if top else (),
                    tool_calls=self._reader().read([c.text for c in choices], request)
                    if request is not None
                    else (),
                ),
            )
        scoring = self._scoring.get(rid)
        if scoring is None:  # aborted meanwhile
            return None
        scoring.read(out.request_id, out)
        if scoring.parts:
            return None
        del self._scoring[rid]
        self._pending.pop(rid, None)
        return Completion(id=rid, loglikelihoods=scoring.loglikelihoods())

    def _render(self, prompt: Prompt, tools: Sequence[Any] = ()) -> tuple[str, list[int]]:
        return rendering.render(
            self._open_llm().get_tokenizer(),
            prompt,
            chat=self.preset.chat,
            preset=self.preset.name,
            template_kwargs=self.preset.chat_template_kwargs,
            tools=tools,
        )

    def _reader(self) -> ToolReader:
        if self._tools is None:
            raise EngineError(f"The engine for preset {self.preset.name!r} is closed.")
        return self._tools

    def _encode(self, prompt: Prompt, continuation: str) -> tuple[list[int], int]:
        """Token ids of the rendered prompt + continuation, and where the continuation starts."""
        return rendering.encode_options(
            self._open_llm().get_tokenizer(),
            prompt,
            [continuation],
            chat=self.preset.chat,
            preset=self.preset.name,
            template_kwargs=self.preset.chat_template_kwargs,
        )[0]

    def _rebuild(self) -> None:
        """Rebuild the engine with the ladder's next settings; admit what was in flight again."""
        pending = list(self._pending.values())
        self._pending.clear()
        self._scoring.clear()
        self.close()
        self._build()
        self.add(pending)

    def _open_llm(self) -> Any:
        if self._llm is None:
            raise EngineError(f"The engine for preset {self.preset.name!r} is closed.")
        return self._llm

    def describe(self) -> dict[str, Any]:
        """What was loaded and how: for the run manifest."""
        import torch
        import vllm

        resolved: dict[str, Any] = {}
        if self._llm is not None:
            config = self._llm.llm_engine.vllm_config
            room = self.room()
            resolved = {
                "max_model_len": config.model_config.max_model_len,
                "max_num_seqs": room.slots,
                "kv_cache_dtype": config.cache_config.cache_dtype,
                "kv_cache_tokens": room.kv_tokens,
            }
        return {
            "backend": "vllm",
            "preset": self.preset.name,
            "model": self.preset.model,
            "model_path": self.model_path,
            "engine_kwargs": dict(self._ladder.kwargs),
            "resolved": resolved,
            "env_defaults": self._env_defaults,
            "cpu_defaults": self._cpu_defaults,
            "versions": {
                "vllm": vllm.__version__,
                "torch": torch.__version__,
                "cuda": torch.version.cuda,
            },
            "device": self._device,
            "builds": self.builds,
            "sampling": self._sampling.to_list(),
            "build_s": round(self.build_s, 2),
            "fallback_steps": self.fallback_steps,
            "batch_invariant": os.environ.get("VLLM_BATCH_INVARIANT") == "1",
        }

    def close(self) -> None:
        """Shut the engine down; safe to call twice. Its memory is freed before the next engine
        is built in this process (or when the process exits)."""
        global _UNRELEASED
        self._pending.clear()
        self._scoring.clear()
        self._refused.clear()
        if self._llm is None:
            return
        _LIVE.discard(self)
        llm, self._llm = self._llm, None
        with _groups_kept_while(_LIVE):
            llm.llm_engine.engine_core.shutdown()
        del llm
        _UNRELEASED = True


def _schema_refused(request: Request) -> Refusal:
    return Refusal(
        reason="refused",
        detail=f"structured output: vLLM's grammar back-end could not compile the json_schema "
        f"{json.dumps(request.json_schema)[:200]} (its log says why); simplify the schema.",
    )


# Separates a request's id from the parts vLLM answers it with (option scoring); a NUL cannot
# occur in the ids the runner makes.
PART = "\0"


# Continuations of up to this many tokens are scored from decoding steps, one per token (two
# covers an option letter after the context's trailing whitespace); longer ones read the
# prompt's log-probabilities in one request instead of one request per token.
STEP_TOKENS = 2
# vLLM's bound on one request's logprob_token_ids (vllm.sampling_params.MAX_LOGPROB_TOKEN_IDS).
MAX_STEP_TOKENS = 128


@functools.cache
def _validation_error() -> type[Exception]:
    """What vLLM raises for a request it refuses to run (VLLMValidationError where this vLLM
    has it; ValueError before)."""
    try:
        from vllm.exceptions import VLLMValidationError
    except ImportError:
        return ValueError
    return VLLMValidationError


@functools.cache
def _reads_chosen_logprobs() -> bool:
    """Whether this vLLM returns the log-probabilities of chosen tokens (`logprob_token_ids`)."""
    from vllm import SamplingParams

    return hasattr(SamplingParams(), "logprob_token_ids")


@dataclass
class _Scoring:
    """An option-scoring request in flight: its encoded options, the vLLM parts answering them
    (each a decoding step after a prefix, or one option's prompt log-probabilities), and what
    came back."""

    encoded: list[tuple[list[int], int]]
    requests: dict[str, tuple[list[int], Any]] = field(default_factory=dict)
    parts: dict[str, tuple[int, ...] | int] = field(default_factory=dict)  # still in flight
    steps: dict[int, list[tuple[tuple[int, ...], int]]] = field(default_factory=dict)
    after: dict[tuple[tuple[int, ...], int], tuple[float, bool]] = field(default_factory=dict)
    found: dict[int, Loglikelihood] = field(default_factory=dict)

    def add(self, part: str, ids: list[int], params: Any, answers: tuple[int, ...] | int) -> None:
        """A part: a step after the prefix `answers`, or option `answers`' prompt logprobs."""
        self.requests[part] = (ids, params)
        self.parts[part] = answers

    def read(self, part: str, out: Any) -> None:
        answers = self.parts.pop(part)
        if isinstance(answers, int):
            ids, start = self.encoded[answers]
            found = [out.prompt_logprobs[p][ids[p]] for p in range(start, len(ids))]
            self.found[answers] = Loglikelihood.of(
                [lp.logprob for lp in found],
                prompt_tokens=start,
                source="vLLM",
                is_greedy=all(lp.rank == 1 for lp in found),
            )
            return
        # One greedy decoding step: its token is the likeliest after the prefix.
        [step], [sampled] = out.outputs[0].logprobs, out.outputs[0].token_ids
        wanted = self.requests[part][1].logprob_token_ids
        for token in wanted:
            self.after[answers, token] = (step[token].logprob, sampled == token)

    def loglikelihoods(self) -> tuple[Loglikelihood, ...]:
        for i, steps in self.steps.items():
            read = [self.after[step] for step in steps]
            self.found[i] = Loglikelihood.of(
                [logprob for logprob, _ in read],
                prompt_tokens=self.encoded[i][1],
                source="vLLM",
                is_greedy=all(greedy for _, greedy in read),
            )
        return tuple(self.found[i] for i in range(len(self.encoded)))


def _steps(choice: Any, top: int) -> tuple[TokenStep, ...]:
    """A vLLM completion's tokens with the `top` likeliest at each position. vLLM gives the
    sampled token and the top ones, each with its rank (1: likeliest)."""
    steps = []
    for token, found in zip(choice.token_ids, choice.logprobs, strict=True):
        ranked = sorted((lp.rank, tid, lp.logprob) for tid, lp in found.items() if lp.rank)
        steps.append(
            TokenStep(
                token=token,
                logprob=found[token].logprob,
                top=tuple((tid, logprob) for rank, tid, logprob in ranked if rank <= top),
            )
        )
    return tuple(steps)


def _params(
    settings: SamplingSettings,
    *,
    top_logprobs: int,
    schema: Any = None,
    keep_special_tokens: bool = False,
) -> Any:
    """vLLM SamplingParams for a task's settings, a request's structured output (`schema`) and
    its tool parser's needs; only finished requests come back."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

    return SamplingParams(
        n=settings.n,
        temperature=settings.temperature,
        top_p=settings.top_p,
        top_k=settings.top_k,
        min_p=settings.min_p,
        max_tokens=settings.max_tokens,
        stop=list(settings.stop) or None,
        ignore_eos=settings.ignore_eos,
        skip_special_tokens=settings.skip_special_tokens and not keep_special_tokens,
        structured_outputs=None if schema is None else StructuredOutputsParams(json=schema),
        # Per-request seeds make a sampled completion independent of its batch (resume).
        seed=settings.seed if settings.temperature > 0 else None,
        logprobs=top_logprobs or None,
        output_kind=RequestOutputKind.FINAL_ONLY,
    )


# What describe() reports of each distinct SamplingParams: everything a task or a model's
# generation_config.json can set, as vLLM holds it.
_DESCRIBED = (
    "n", "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty",
    "frequency_penalty", "max_tokens", "seed", "stop", "ignore_eos", "skip_special_tokens",
)  # fmt: skip


def _described(params: Any) -> dict[str, Any]:
    return {name: getattr(params, name) for name in _DESCRIBED}
