"""The out-of-memory ladder: recognise vLLM's memory failures and step engine settings down.

Pure: it reads exceptions and rewrites a dict of `vllm.LLM` keyword arguments; building and
rebuilding the engine is vllm.py's job. The patterns below are vLLM 0.32's own messages
(vllm/v1/core/kv_cache_utils.py, vllm/v1/worker/utils.py, vllm/v1/worker/cpu_worker.py,
vllm/v1/worker/gpu_model_runner.py) and torch's OutOfMemoryError.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from evalpipe.catalog.preset import ROPE_OVERRIDES
from evalpipe.core.errors import EngineError
from evalpipe.planning.ladderlog import undone, weight_step
from evalpipe.planning.memory import WEIGHT_QUANT_STEPS, WeightQuantStep

Kind = Literal["kv_capacity", "no_kv_memory", "startup_memory", "device_oom"]

# What each kind means to a user, for step records and the final message.
KIND_TEXT: dict[Kind, str] = {
    "kv_capacity": "the KV cache cannot hold one sequence of max_model_len tokens",
    "no_kv_memory": "no memory is left for the KV cache after loading the model",
    "startup_memory": "less memory is free than gpu_memory_utilization asks for",
    "device_oom": "the device ran out of memory",
}

_KV_CAPACITY = re.compile(r"max seq len \((\d+)\).*?KV cache is needed", re.S)
_MAX_LEN_FITS = re.compile(r"estimated maximum model length is (\d+)")
_NO_KV_MEMORY = "No available memory for the cache blocks"
_STARTUP = (
    "is less than desired GPU memory utilization",
    "is less than desired CPU memory utilization",
    "is less than the engine's budget",
    "less than requested memory for kv",
)
_FREE = re.compile(r"Free memory on device \S+ \(([\d.]+)/([\d.]+) GiB\)")
_DEVICE_OOM = re.compile(
    r"out of memory|OutOfMemoryError|not enough GPU memory|CUBLAS_STATUS_ALLOC_FAILED", re.I
)
_OOM_TYPES = ("OutOfMemoryError", "MemoryError")

# Bits per weight of each format the ladder loads; a later step only ever lowers them.
_LADDER_BITS = {s.kwargs["quantization"]: s.fmt.bits for s in WEIGHT_QUANT_STEPS}


@dataclass(frozen=True, kw_only=True)
class MemoryFailure:
    """An out-of-memory failure as vLLM reported it."""

    kind: Kind
    message: str  # vLLM's words, on one line
    max_len_fits: int | None = None  # vLLM's estimate of the longest sequence the KV cache holds
    free_fraction: float | None = None  # free / total device memory when the engine started


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and its causes/contexts, outermost first, each once."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not s for s in seen):
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def summary(exc: BaseException, limit: int = 800) -> str:
    """'Type: message' on one line, cut at `limit` characters (vLLM's messages can be long)."""
    text = " ".join(str(exc).split())
    line = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return line if len(line) <= limit else line[: limit - 1] + "…"


def classify(exc: BaseException) -> MemoryFailure | None:
    """The memory failure behind `exc`, or None when it is something else."""
    for err in reversed(_chain(exc)):  # innermost first: the root cause names the kind best
        text = str(err)
        words = " ".join(text.split())
        if _KV_CAPACITY.search(text):
            fits = _MAX_LEN_FITS.search(text)
            return MemoryFailure(
                kind="kv_capacity",
                message=words,
                max_len_fits=int(fits.group(1)) if fits else None,
            )
        if _NO_KV_MEMORY in text:
            return MemoryFailure(kind="no_kv_memory", message=words)
        if any(p in text for p in _STARTUP):
            free = _FREE.search(text)
            fraction = float(free.group(1)) / float(free.group(2)) if free else None
            return MemoryFailure(kind="startup_memory", message=words, free_fraction=fraction)
        names = {c.__name__ for c in type(err).__mro__}
        if names & set(_OOM_TYPES) or _DEVICE_OOM.search(text):
            return MemoryFailure(kind="device_oom", message=summary(err))
    return None


@dataclass(frozen=True, kw_only=True)
class Context:
    """What the ladder may assume about the job and the device."""

    # The longest sequence the tasks need (prompt + max_tokens); max_model_len never goes below.
    min_model_len: int | None
    # The KV cache size is fixed (kv_cache_memory_bytes, VLLM_CPU_KVCACHE_SPACE): steps that
    # only free memory *for* the KV cache cannot help a KV shortage then.
    kv_budget_fixed: bool
    fp8_weights: bool  # vLLM's fp8 weight quantization runs here (fp8_weights_supported)
    bnb_4bit: bool = False  # vLLM can load the weights as bitsandbytes NF4 (bitsandbytes_supported)
    fp8_kv: bool = True  # vLLM stores an fp8 KV cache here (fp8_kv_cache_supported)
    # The preset's own `quantization` (the Ladder fills it in from its first kwargs): the ladder
    # never replaces it, while its own 8-bit step may give way to 4 bits.
    preset_quantization: str | None = None
    # The model's native context where its rope scaling is passed past it (hf_overrides): a
    # context shortened to it or below runs without the scaling, as the model cards advise.
    native_context: int | None = None


# A step looks at the current kwargs and the failure and returns the changed keys with a short
# description, or None when it does not apply (or would change nothing).
Change = tuple[dict[str, Any], str]
StepFn = Callable[[dict[str, Any], MemoryFailure, Context], Change | None]

# Kinds helped by freeing activation/graph memory or taking more of the device.
_FREES_MEMORY: tuple[Kind, ...] = ("device_oom", "no_kv_memory", "kv_capacity")
DEFAULT_MAX_NUM_SEQS = 256  # vLLM 0.32's LLM-class default on most devices (1024 on H100/H200)
MAX_UTILIZATION = 0.95


def _helps(failure: MemoryFailure, ctx: Context, kinds: tuple[Kind, ...]) -> bool:
    """Whether freeing device memory can help: not for a KV shortage when its size is fixed."""
    if failure.kind not in kinds:
        return False
    return not (failure.kind in ("kv_capacity", "no_kv_memory") and ctx.kv_budget_fixed)


def fewer_sequences(kw: dict[str, Any], failure: MemoryFailure, ctx: Context) -> Change | None:
    if not _helps(failure, ctx, _FREES_MEMORY):
        return None
    current = kw.get("max_num_seqs") or DEFAULT_MAX_NUM_SEQS
    new = max(1, current // 4)
    if new >= current:
        return None
    return {"max_num_seqs": new}, f"max_num_seqs {current} → {new} (fewer concurrent sequences)"


def eager_mode(kw: dict[str, Any], failure: MemoryFailure, ctx: Context) -> Change | None:
    if not _helps(failure, ctx, _FREES_MEMORY) or kw.get("enforce_eager"):
        return None
    return {"enforce_eager": True}, "enforce_eager on (no CUDA graph memory)"


def utilization(kw: dict[str, Any], failure: MemoryFailure, ctx: Context) -> Change | None:
    """Less headroom for a KV shortage; more headroom when the device itself ran out."""
    current = float(kw.get("gpu_memory_utilization") or 0.9)
    if failure.kind == "startup_memory":
        if failure.free_fraction is not None:
            new = round(failure.free_fraction - 0.02, 2)
        else:
            new = round(current - 0.1, 2)
    elif failure.kind == "device_oom":
        new = round(current - 0.05, 2)
    elif _helps(failure, ctx, ("no_kv_memory", "kv_capacity")):
        new = max(current, MAX_UTILIZATION)
    else:
        return None
    if new == current or not 0.05 <= new <= MAX_UTILIZATION:
        return None
    why = "less headroom, more KV cache" if new > current else "more headroom"
    return {"gpu_memory_utilization": new}, f"gpu_memory_utilization {current} → {new} ({why})"


def fp8_kv_cache(kw: dict[str, Any], failure: MemoryFailure, ctx: Context) -> Change | None:
    current = kw.get("kv_cache_dtype", "auto")
    if not ctx.fp8_kv or failure.kind != "kv_capacity" or str(current).startswith("fp8"):
        return None
    return {"kv_cache_dtype": "fp8"}, f"kv_cache_dtype {current} → fp8 (half the KV bytes)"


def shorter_context(kw: dict[str, Any], failure: MemoryFailure, ctx: Context) -> Change | None:
    """Only down to what the tasks need, and only when that is known."""
    current = kw.get("max_model_len")
    if failure.kind != "kv_capacity" or ctx.min_model_len is None or current is None:
        return None
    target = failure.max_len_fits if failure.max_len_fits is not None else current // 2
    new = min(target, current - 1)
    if new < ctx.min_model_len:
        return None
    change: dict[str, Any] = {"max_model_len": new}
    overrides = kw.get("hf_overrides")
    if ctx.native_context is not None and new <= ctx.native_context and overrides:
        change["hf_overrides"] = {k: v for k, v in overrides.items() if k not in ROPE_OVERRIDES}
    return change, f"max_model_len {current} → {new} (the tasks need {ctx.min_model_len})"


def _weight_step(step: WeightQuantStep) -> StepFn:
    """The ladder step that loads the weights in `step`'s format, where the device offers it."""

    def take(kw: dict[str, Any], failure: MemoryFailure, ctx: Context) -> Change | None:
        offered = {"fp8_weights": ctx.fp8_weights, "bnb_4bit_weights": ctx.bnb_4bit}[step.name]
        current = kw.get("quantization")
        if not offered or ctx.preset_quantization is not None:
            return None
        if current is not None and _LADDER_BITS.get(current, 0) <= step.fmt.bits:
            return None
        if not _helps(failure, ctx, _FREES_MEMORY):
            return None
        value = step.kwargs["quantization"]
        return dict(step.kwargs), weight_step(current, value)

    return take


# The order of the ladder: cheapest loss of throughput or fidelity first; the weight formats
# last, in memory.WEIGHT_QUANT_STEPS' order (which the planner's advice shares).
STEPS: tuple[tuple[str, StepFn], ...] = (
    ("fewer_sequences", fewer_sequences),
    ("eager_mode", eager_mode),
    ("utilization", utilization),
    ("fp8_kv_cache", fp8_kv_cache),
    ("shorter_context", shorter_context),
    *((step.name, _weight_step(step)) for step in WEIGHT_QUANT_STEPS),
)


def fp8_weights_supported() -> bool:
    """Whether vLLM's fp8 weight quantization runs on this device.

    GPUs with FP8 compute (compute capability 8.9 and newer) run it natively; older ones down to
    the capability vLLM's Fp8Config asks for (7.5 in 0.32: Turing, Ampere) run the weights in
    8 bits through its weight-only Marlin kernel, so an A100 also has an 8-bit step.
    """
    from vllm.model_executor.layers.quantization.fp8 import Fp8Config
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        return False
    return bool(current_platform.has_device_capability(Fp8Config.get_min_capability()))


def fp8_kv_cache_supported() -> bool:
    """Whether vLLM can store the KV cache in fp8 on this device.

    vLLM's CPU attention refuses it on a CPU without AVX-512 or AMX ("FP8 KV cache on CPU
    requires x86 with AVX-512 or AMX", vllm/v1/attention/backends/cpu_attn.py `_get_attn_isa`), so
    the step would only cost a build there. A GPU that refuses it says so when the engine is
    built, and the ladder undoes the step.
    """
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return True
    import torch

    return bool(torch.cpu._is_avx512_supported() or torch.cpu._is_amx_tile_supported())


def bitsandbytes_supported() -> bool:
    """Whether the installed vLLM can quantize weights with bitsandbytes on this device.

    vLLM dropped bitsandbytes after 0.1x (0.32 has none), it needs CUDA and the bitsandbytes
    package. Whether the model's architecture supports it shows when the engine is built: the
    ladder undoes the step when that build fails ("does not support BitsAndBytes quantization").
    """
    from importlib.util import find_spec

    from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS
    from vllm.platforms import current_platform

    return (
        "bitsandbytes" in QUANTIZATION_METHODS
        and current_platform.is_cuda()
        and find_spec("bitsandbytes") is not None
    )


class Ladder:
    """Walks STEPS as memory failures come in; records every step taken.

    Each step is taken at most once, in order, skipping steps that cannot help the failure at
    hand. If the attempt right after a step fails for another reason (the device does not
    support fp8, say), the step is undone and the ladder goes on from the memory failure.
    """

    def __init__(
        self,
        kwargs: dict[str, Any],
        *,
        context: Context,
        enabled: bool = True,
        subject: str,
    ) -> None:
        self.kwargs = dict(kwargs)
        self.context = dataclasses.replace(context, preset_quantization=kwargs.get("quantization"))
        self.enabled = enabled
        self.subject = subject  # "preset NAME", for messages
        self.steps: list[str] = []
        self._tried: set[str] = set()
        # (step name, kwargs before it, the failure it answered) until an attempt succeeds.
        self._pending: tuple[str, dict[str, Any], MemoryFailure] | None = None

    def succeeded(self) -> None:
        self._pending = None

    def recover(self, exc: BaseException, phase: str) -> None:
        """Take the next step after `exc` (phase "build" or "generate"), or raise EngineError."""
        failure = classify(exc)
        if failure is None:
            if self._pending is None:
                raise EngineError(
                    f"vLLM failed ({phase}) for {self.subject}: {summary(exc)}"
                ) from exc
            name, before, failure = self._pending
            self.kwargs = before
            self.steps.append(undone(name, summary(exc)))
        if not self.enabled:
            raise EngineError(
                f"Out of memory ({phase}) for {self.subject}: {failure.message} "
                f"The OOM fallback is off (--no-oom-fallback). {self.suggestion(failure)}"
            ) from exc
        for name, step in STEPS:
            if name in self._tried:
                continue
            change = step(self.kwargs, failure, self.context)
            if change is None:
                continue
            changed, description = change
            self._tried.add(name)
            self._pending = (name, dict(self.kwargs), failure)
            self.kwargs.update(changed)
            self.steps.append(f"{phase}: {KIND_TEXT[failure.kind]} → {description}")
            return
        tried = "; ".join(self.steps) if self.steps else "no step applies"
        raise EngineError(
            f"Out of memory ({phase}) for {self.subject} after every fallback step: "
            f"{failure.message} Steps taken: {tried}. {self.suggestion(failure)}"
        ) from exc

    def suggestion(self, failure: MemoryFailure) -> str:
        """What the planner would say: a layout with more memory per sequence."""
        tp = int(self.kwargs.get("tensor_parallel_size") or 1)
        pp = int(self.kwargs.get("pipeline_parallel_size") or 1)
        name = self.subject.removeprefix("preset ")
        advice = (
            f"Suggestion: give the model more memory — tensor_parallel_size {2 * tp} "
            f"(now {tp}×{pp} GPUs), a larger GPU or a quantized preset; "
            f"`evalpipe plan --preset {name} --gpu GPU` sizes a layout that fits."
        )
        if self.context.kv_budget_fixed and failure.kind in ("kv_capacity", "no_kv_memory"):
            advice += (
                " The KV cache size is fixed here: raise engine_kwargs.kv_cache_memory_bytes "
                "(or VLLM_CPU_KVCACHE_SPACE on the CPU)."
            )
        if failure.kind == "kv_capacity" and failure.max_len_fits is not None:
            advice += (
                f" Or lower max_model_len to {failure.max_len_fits} or less "
                "(--max-model-len) if the tasks allow."
            )
        return advice
