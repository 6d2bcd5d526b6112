"""The OOM ladder: vLLM 0.32's memory failures are recognised and settings step down in order.

The messages below are vLLM 0.32's own (formats from vllm/v1/core/kv_cache_utils.py,
vllm/v1/worker/utils.py and vllm/v1/worker/gpu_model_runner.py, numbers filled in). The real
engine's recovery is tested in test_engine_vllm.py.
"""

from __future__ import annotations

import pytest

from evalpipe.core.errors import EngineError
from evalpipe.engine.fallback import Context, Ladder, classify
from evalpipe.planning.ladderlog import ladder_quantization

KV_CAPACITY = ValueError(
    "To serve at least one request with the model's max seq len (32768), (4.00 GiB KV cache is "
    "needed, which is larger than the available KV cache memory (2.50 GiB). Based on the "
    "available memory, the estimated maximum model length is 20480. Try increasing "
    "`gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or decreasing "
    "`max_model_len` when initializing the engine. See "
    "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
)
NO_KV_MEMORY = ValueError(
    "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
    "initializing the engine (this flag also controls CPU memory reservation on the CPU "
    "backend, despite its name)."
)
STARTUP = ValueError(
    "Free memory on device cuda:0 (60.0/79.19 GiB) on startup is less than desired GPU memory "
    "utilization (0.9, 71.27 GiB). Decrease GPU memory utilization or reduce GPU memory used by "
    "other processes."
)


class OutOfMemoryError(RuntimeError):
    """Named like torch.OutOfMemoryError (torch.cuda.OutOfMemoryError is the same class)."""


GPU = Context(min_model_len=None, kv_budget_fixed=False, fp8_weights=True)
BASE = {"tensor_parallel_size": 4, "max_model_len": 32768, "gpu_memory_utilization": 0.9}


def ladder(context: Context = GPU, **kwargs: object) -> Ladder:
    return Ladder({**BASE, **kwargs}, context=context, subject="preset big")


def test_classify_reads_vllm_messages_and_the_cause_chain() -> None:
    kv = classify(KV_CAPACITY)
    assert kv is not None and kv.kind == "kv_capacity" and kv.max_len_fits == 20480
    assert classify(NO_KV_MEMORY).kind == "no_kv_memory"  # type: ignore[union-attr]
    startup = classify(STARTUP)
    assert startup is not None and startup.kind == "startup_memory"
    assert startup.free_fraction == pytest.approx(60.0 / 79.19)
    assert classify(OutOfMemoryError("CUDA error")).kind == "device_oom"  # type: ignore[union-attr]
    # TP workers report the cause inside vLLM's own RuntimeError.
    wrapped = RuntimeError(
        "Worker failed with error 'CUDA out of memory. Tried to allocate 2.00 GiB', please check"
        " the stack trace above for the root cause"
    )
    assert classify(wrapped).kind == "device_oom"  # type: ignore[union-attr]
    try:
        try:
            raise KV_CAPACITY
        except ValueError as inner:
            raise RuntimeError("Engine core initialization failed.") from inner
    except RuntimeError as outer:
        assert classify(outer).kind == "kv_capacity"  # type: ignore[union-attr]
    assert classify(ValueError("max_model_len (99999) > max_position_embeddings")) is None


def test_kv_shortage_walks_the_ladder_in_order_then_stops_with_a_suggestion() -> None:
    steps = ladder(Context(min_model_len=8192, kv_budget_fixed=False, fp8_weights=True))
    seen = []
    for _ in range(6):
        steps.recover(KV_CAPACITY, "build")
        seen.append(dict(steps.kwargs))
    assert seen[0]["max_num_seqs"] == 64
    assert seen[1]["enforce_eager"] is True
    assert seen[2]["gpu_memory_utilization"] == 0.95  # less headroom: more room for the KV cache
    assert seen[3]["kv_cache_dtype"] == "fp8"
    assert seen[4]["max_model_len"] == 20480  # vLLM's estimate, above the tasks' 8192
    assert seen[5]["quantization"] == "fp8"
    assert len(steps.steps) == 6 and "max_model_len 32768 → 20480" in steps.steps[4]
    with pytest.raises(EngineError) as err:
        steps.recover(KV_CAPACITY, "build")
    message = str(err.value)
    assert "after every fallback step" in message and "max_num_seqs 256 → 64" in message
    assert "tensor_parallel_size 8" in message and "evalpipe plan --preset big" in message
    assert "max_model_len to 20480" in message


def test_context_is_never_shortened_below_the_tasks_need_or_without_one() -> None:
    fixed = Context(min_model_len=None, kv_budget_fixed=True, fp8_weights=False)
    unknown_need = ladder(fixed)
    unknown_need.recover(KV_CAPACITY, "build")  # fp8 KV cache is the only step that helps
    with pytest.raises(EngineError):
        unknown_need.recover(KV_CAPACITY, "build")
    assert unknown_need.kwargs["max_model_len"] == 32768
    too_short = ladder(Context(min_model_len=30000, kv_budget_fixed=True, fp8_weights=False))
    too_short.recover(KV_CAPACITY, "build")
    with pytest.raises(EngineError, match="max_model_len to 20480"):
        too_short.recover(KV_CAPACITY, "build")
    assert too_short.kwargs["max_model_len"] == 32768


def test_fixed_kv_budget_skips_steps_that_only_make_room_for_it() -> None:
    fixed = ladder(Context(min_model_len=1024, kv_budget_fixed=True, fp8_weights=True))
    fixed.recover(KV_CAPACITY, "build")
    assert fixed.kwargs["kv_cache_dtype"] == "fp8"
    assert "max_num_seqs" not in fixed.kwargs and "enforce_eager" not in fixed.kwargs


def test_device_oom_gives_more_headroom_and_startup_failure_fits_free_memory() -> None:
    oom = ladder(enforce_eager=True, max_num_seqs=512)
    oom.recover(OutOfMemoryError("CUDA out of memory"), "generate")
    assert oom.kwargs["max_num_seqs"] == 128
    oom.recover(OutOfMemoryError("CUDA out of memory"), "generate")
    assert oom.kwargs["gpu_memory_utilization"] == 0.85  # eager was on already: skipped
    assert oom.steps[0].startswith("generate: the device ran out of memory")
    startup = ladder()
    startup.recover(STARTUP, "build")
    assert startup.kwargs["gpu_memory_utilization"] == 0.74  # 60/79.19 free, minus 0.02


def test_a_step_the_device_refuses_is_undone_and_the_ladder_goes_on() -> None:
    steps = ladder(Context(min_model_len=4096, kv_budget_fixed=True, fp8_weights=False))
    steps.recover(KV_CAPACITY, "build")
    assert steps.kwargs["kv_cache_dtype"] == "fp8"
    steps.recover(
        NotImplementedError("FP8 KV cache on CPU requires x86 with AVX-512 or AMX."), "build"
    )
    assert "kv_cache_dtype" not in steps.kwargs  # undone
    assert steps.kwargs["max_model_len"] == 20480
    assert "fp8_kv_cache undone" in steps.steps[1]


def test_a_device_without_an_fp8_kv_cache_shortens_the_context_first() -> None:
    cpu = ladder(Context(min_model_len=4096, kv_budget_fixed=True, fp8_weights=False, fp8_kv=False))
    cpu.recover(KV_CAPACITY, "build")
    assert "kv_cache_dtype" not in cpu.kwargs
    assert cpu.kwargs["max_model_len"] == 20480
    assert len(cpu.steps) == 1


def test_other_failures_and_a_disabled_ladder_raise_engine_errors() -> None:
    with pytest.raises(EngineError, match="vLLM failed \\(build\\) for preset big: ValueError"):
        ladder().recover(ValueError("unknown architecture"), "build")
    off = Ladder(dict(BASE), context=GPU, enabled=False, subject="preset big")
    with pytest.raises(EngineError, match="OOM fallback is off"):
        off.recover(NO_KV_MEMORY, "build")
    assert off.steps == []


# A100/RTX 3090: no FP8 compute, fp8 weights through vLLM's weight-only Marlin kernel, and a
# vLLM with bitsandbytes (0.10 to 0.1x).
AMPERE = Context(min_model_len=None, kv_budget_fixed=False, fp8_weights=True, bnb_4bit=True)
# The device OOM text of torch's caching allocator, as vLLM's workers pass it on.
CUDA_OOM = OutOfMemoryError(
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB "
    "of which 1.06 GiB is free."
)
# BitsAndBytesModelLoader._verify_model_compatibility for an architecture without packed
# modules (vLLM 0.10 to 0.1x).
BNB_UNSUPPORTED = AttributeError(
    "Model MambaForCausalLM does not support BitsAndBytes quantization yet. No "
    "'packed_modules_mapping' found."
)


def _to_the_weights(steps: Ladder) -> None:
    for _ in range(3):  # fewer sequences, eager mode, more headroom
        steps.recover(CUDA_OOM, "build")


def test_on_an_a100_the_ladder_steps_to_8_then_4_bit_weights_and_says_so() -> None:
    steps = ladder(AMPERE)
    _to_the_weights(steps)
    assert "quantization" not in steps.kwargs and ladder_quantization(steps.steps) is None
    steps.recover(CUDA_OOM, "build")
    assert steps.kwargs["quantization"] == "fp8"  # 8 bits first
    assert "quantization none → fp8" in steps.steps[-1] and "OOM fallback" in steps.steps[-1]
    assert ladder_quantization(steps.steps) == "fp8"
    steps.recover(CUDA_OOM, "build")  # still too big: 4 bits replace the 8
    assert steps.kwargs["quantization"] == "bitsandbytes"
    assert steps.kwargs["load_format"] == "bitsandbytes"
    assert steps.kwargs["tensor_parallel_size"] == 4  # in-flight NF4 is sharded per TP rank
    assert "quantization fp8 → bitsandbytes" in steps.steps[-1]
    assert ladder_quantization(steps.steps) == "bitsandbytes"
    with pytest.raises(EngineError, match="after every fallback step"):
        steps.recover(CUDA_OOM, "generate")


def test_vllm_032_on_an_a100_stops_at_8_bit_weights() -> None:
    steps = ladder(Context(min_model_len=None, kv_budget_fixed=False, fp8_weights=True))
    _to_the_weights(steps)
    steps.recover(CUDA_OOM, "build")
    assert steps.kwargs["quantization"] == "fp8"
    with pytest.raises(EngineError, match="after every fallback step"):
        steps.recover(CUDA_OOM, "build")
    assert ladder_quantization(steps.steps) == "fp8"


def test_a_preset_quantization_is_never_replaced() -> None:
    for own in ("awq", "fp8"):
        kept = ladder(AMPERE, quantization=own)
        _to_the_weights(kept)
        with pytest.raises(EngineError):
            kept.recover(CUDA_OOM, "build")
        assert kept.kwargs["quantization"] == own and ladder_quantization(kept.steps) is None


def test_an_architecture_without_bitsandbytes_support_undoes_the_step() -> None:
    steps = ladder(AMPERE)
    _to_the_weights(steps)
    steps.recover(CUDA_OOM, "build")
    steps.recover(CUDA_OOM, "build")
    with pytest.raises(EngineError, match="after every fallback step"):
        steps.recover(BNB_UNSUPPORTED, "build")
    assert steps.kwargs["quantization"] == "fp8" and "load_format" not in steps.kwargs
    assert "bnb_4bit_weights undone" in steps.steps[-1]
    assert ladder_quantization(steps.steps) == "fp8"  # the run's weights stayed in 8 bits


@pytest.mark.vllm
def test_weight_steps_set_engine_args_the_installed_vllm_knows() -> None:
    from evalpipe.engine.fallback import bitsandbytes_supported
    from evalpipe.engine.vllm import engine_arg_names
    from evalpipe.planning.memory import WEIGHT_QUANT_STEPS

    valid = engine_arg_names()
    for step in WEIGHT_QUANT_STEPS:
        assert set(step.kwargs) <= valid, step.name
    # vLLM 0.32 has no bitsandbytes (and this is the CPU build): the NF4 step is never offered.
    assert not bitsandbytes_supported()


@pytest.mark.vllm
@pytest.mark.parametrize(
    ("capability", "offered"), [((8, 0), True), ((9, 0), True), ((7, 0), False)]
)
def test_fp8_weights_are_offered_from_the_capability_vllm_asks_for(
    monkeypatch: pytest.MonkeyPatch, capability: tuple[int, int], offered: bool
) -> None:
    from vllm.platforms import current_platform
    from vllm.platforms.interface import DeviceCapability

    from evalpipe.engine.fallback import fp8_weights_supported

    assert not fp8_weights_supported()  # the CPU build
    platform = type(current_platform)
    monkeypatch.setattr(platform, "is_cpu", lambda *_: False)
    monkeypatch.setattr(
        platform,
        "get_device_capability",
        classmethod(lambda cls, device_id=0: DeviceCapability(*capability)),
    )
    # A100 (8.0): weight-only Marlin; H100 (9.0): FP8 compute; V100 (7.0): neither.
    assert fp8_weights_supported() is offered
