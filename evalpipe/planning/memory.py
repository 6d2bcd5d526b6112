"""Memory model: weights, KV cache and runtime overhead per GPU for one layout (pure).

Figures are bytes per GPU unless a name says otherwise. The numbers and their sources are in
docs/planner.md, under the constants' names.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from evalpipe.catalog.gpus import Gpu
from evalpipe.catalog.preset import DTYPE_BYTES, Architecture, Preset
from evalpipe.core.errors import ConfigError

GIB = 1024**3

# Per-GPU runtime overhead inside vLLM's gpu_memory_utilization budget (docs/planner.md):
# non-torch allocations made after vLLM's baseline snapshot (attention-backend workspaces),
NON_TORCH_GIB = 0.25
# NCCL channel buffers and vLLM's custom all-reduce buffers, once more than one GPU talks,
COMMS_GIB = 0.5
# and CUDA graphs, which vLLM >= 0.21 profiles and charges to the budget (0 with enforce_eager).
CUDA_GRAPHS_GIB = 1.0
# Activations: one dummy forward pass of max_num_batched_tokens tokens keeps about this many
# hidden-size vectors alive per token (residual, norm output, attention in/out, ...), plus
ACTIVATION_HIDDEN_VECTORS = 6
# the FFN's gate/up output and its activation (3 × the FFN width per TP rank), plus the
# sampler's float32 logits and probabilities for max_num_seqs sequences.
ACTIVATION_FFN_VECTORS = 3
LOGITS_COPIES = 2


@dataclass(frozen=True, kw_only=True)
class WeightFormat:
    """How one weight is stored: its bits plus the scale (and zero point) shared by a group."""

    label: str
    bits: float
    group: int | None = None  # weights per scale; None: per-tensor/per-channel, negligible
    scale_bits: float = 0.0  # scale (+ zero point) bits per group
    experts_only: bool = False  # only the routed experts are stored this way (gpt-oss MXFP4)

    @property
    def bytes_per_param(self) -> float:
        return (self.bits + (self.scale_bits / self.group if self.group else 0.0)) / 8


# Quantized checkpoints keep embeddings and the output head in the model dtype.
WEIGHT_FORMATS: dict[str, WeightFormat] = {
    # FP8 with one float32 scale per 128×128 block (DeepSeek-V3 / Qwen3-FP8 checkpoints); the
    # per-tensor scales of vLLM's online `quantization: fp8` are smaller still.
    "fp8": WeightFormat(label="fp8", bits=8, group=128 * 128, scale_bits=32),
    # 4-bit AWQ/GPTQ, group size 128: a float16 scale and a packed 4-bit zero point per group.
    "awq": WeightFormat(label="int4 (AWQ)", bits=4, group=128, scale_bits=16 + 4),
    "gptq": WeightFormat(label="int4 (GPTQ)", bits=4, group=128, scale_bits=16 + 4),
    # bitsandbytes NF4: one float32 absmax per 64 weights.
    "bitsandbytes": WeightFormat(label="nf4 (bitsandbytes)", bits=4, group=64, scale_bits=32),
    # OCP MXFP4: one 8-bit power-of-two scale per 32 weights, experts only.
    "mxfp4": WeightFormat(label="mxfp4", bits=4, group=32, scale_bits=8, experts_only=True),
}


@dataclass(frozen=True, kw_only=True)
class WeightQuantStep:
    """A weight format vLLM can produce from a 16-bit checkpoint while loading it.

    The OOM ladder takes these steps in this order (evalpipe/engine/fallback.py) and the
    planner's "what would fit" advice lists them in the same order with the same sizes.
    """

    name: str  # the ladder step's name, recorded in the manifest
    fmt: WeightFormat
    kwargs: dict[str, Any]  # what the step sets in vLLM's engine arguments
    how: str  # for the planner's advice


# 8 bits on load is vLLM's fp8 (FP8 compute from compute capability 8.9, weight-only Marlin on
# older GPUs such as the A100). vLLM's in-flight bitsandbytes quantization is NF4 only
# (BitsAndBytesModelLoader quantizes an unquantized checkpoint with quantize_4bit); 8-bit
# bitsandbytes needs a pre-quantized checkpoint. vLLM 0.32 has no bitsandbytes at all; the
# ladder checks the installed vLLM.
WEIGHT_QUANT_STEPS: tuple[WeightQuantStep, ...] = (
    WeightQuantStep(
        name="fp8_weights",
        fmt=WEIGHT_FORMATS["fp8"],
        kwargs={"quantization": "fp8"},
        how="quantization: fp8 (vLLM quantizes a bf16 checkpoint on load)",
    ),
    WeightQuantStep(
        name="bnb_4bit_weights",
        fmt=WEIGHT_FORMATS["bitsandbytes"],
        kwargs={"quantization": "bitsandbytes", "load_format": "bitsandbytes"},
        how="quantization: bitsandbytes (vLLM quantizes a bf16 checkpoint to NF4 on load)",
    ),
)


@dataclass(frozen=True, kw_only=True)
class Sizing:
    """Per-GPU memory figures of one layout, in bytes."""

    weights: float
    overhead: float
    seq: float  # one full-length sequence's KV cache
    usable: float
    # Held while the weights load, before any KV cache: the checkpoint-precision weights when
    # vLLM quantizes on load (see load_peak_bytes); 0 when loading holds no more than `weights`.
    load_peak: float = 0.0
    gpu_total: float = math.inf

    @property
    def kv_space(self) -> float:
        return self.usable - self.weights - self.overhead

    @property
    def seqs(self) -> int:
        return max(0, math.floor(self.kv_space / self.seq)) if self.seq else 0

    @property
    def fits(self) -> bool:
        return self.seqs >= 1 and self.load_fits

    @property
    def load_fits(self) -> bool:
        return self.load_peak <= self.gpu_total


@dataclass(frozen=True, kw_only=True)
class Workload:
    """The facts one sizing needs: preset, weight format, GPU, sequence length."""

    preset: Preset
    fmt: WeightFormat | None  # None: unquantized, the preset's dtype
    gpu: Gpu
    max_model_len: int
    # A site's measured correction to the overhead below (cluster profile, from `evalpipe smoke`).
    overhead_correction_gib: float = 0.0

    @property
    def arch(self) -> Architecture:
        return self.preset.architecture

    @property
    def dtype_bytes(self) -> float:
        return DTYPE_BYTES[self.preset.dtype]

    @property
    def kv_bytes(self) -> float:
        return 1.0 if self.preset.kv_cache_dtype.startswith("fp8") else self.dtype_bytes

    def engine(self, key: str) -> Any:
        return self.preset.engine_kwargs.get(key)

    @property
    def max_num_batched_tokens(self) -> int:
        return int(self.engine("max_num_batched_tokens") or vllm_batch_defaults(self.gpu)[0])

    @property
    def max_num_seqs(self) -> int:
        return int(self.engine("max_num_seqs") or vllm_batch_defaults(self.gpu)[1])

    def with_format(self, fmt: WeightFormat | None) -> Workload:
        return dataclasses.replace(self, fmt=fmt)

    def with_gpu(self, gpu: Gpu) -> Workload:
        return dataclasses.replace(self, gpu=gpu)


def max_seqs(preset: Preset, gpu: Gpu) -> int:
    """vLLM's max_num_seqs for this preset on this device (the preset's, else vLLM's default)."""
    return int(preset.engine_kwargs.get("max_num_seqs") or vllm_batch_defaults(gpu)[1])


def vllm_batch_defaults(gpu: Gpu) -> tuple[int, int]:
    """vLLM's offline (LLM class) max_num_batched_tokens and max_num_seqs for this GPU.

    vllm/engine/arg_utils.py get_batch_defaults: >= 160 GiB, or >= 70 GiB and not an A100, get
    16384 tokens and 1024 sequences; others 8192 and 256; the CPU build 4096 and 256 (per
    rank; the planner sizes one rank).
    """
    if not gpu.is_gpu:
        return (4096, 256)
    big = gpu.memory_gib >= 160 or (
        gpu.memory_gib >= 70 and "a100" not in (gpu.device_name or gpu.name).lower()
    )
    return (16384, 1024) if big else (8192, 256)


def embedding_bytes(arch: Architecture, dtype_bytes: float) -> float:
    """One vocab × hidden matrix (input embedding or output head), never quantized."""
    return arch.vocab_size * arch.hidden_size * dtype_bytes


def embedding_matrices(arch: Architecture) -> int:
    return 1 if arch.tie_word_embeddings else 2


def body_bytes(arch: Architecture, dtype_bytes: float, fmt: WeightFormat | None) -> float:
    """Every parameter outside the embeddings/output head: the decoder layers."""
    body = arch.params_b * 1e9 - embedding_matrices(arch) * arch.vocab_size * arch.hidden_size
    if fmt is None:
        return body * dtype_bytes
    if fmt.experts_only:
        if arch.moe is None or arch.moe.expert_params_b is None:
            raise ConfigError(
                f"{fmt.label} quantizes only the MoE experts, but the preset does not give "
                "architecture.moe.expert_params_b; add it (from the model card) to size it."
            )
        quantized = arch.moe.expert_params_b * 1e9
    else:
        quantized = body
    return quantized * fmt.bytes_per_param + (body - quantized) * dtype_bytes


def weights_bytes(arch: Architecture, dtype_bytes: float, fmt: WeightFormat | None) -> float:
    """The whole model's weights."""
    return body_bytes(arch, dtype_bytes, fmt) + embedding_matrices(arch) * embedding_bytes(
        arch, dtype_bytes
    )


def weights_per_gpu_bytes(w: Workload, tp: int, pp: int) -> float:
    """The fullest GPU: a stage with ceil(layers/pp) layers plus an embedding matrix.

    vLLM splits layers evenly over PP stages and every matrix over TP ranks. With PP the input
    embedding lives on the first stage and the output head on the last (even when tied).
    """
    arch = w.arch
    layer_share = math.ceil(arch.layers / pp) / arch.layers
    matrices = embedding_matrices(arch) if pp == 1 else 1
    body = body_bytes(arch, w.dtype_bytes, w.fmt) * layer_share
    return (body + matrices * embedding_bytes(arch, w.dtype_bytes)) / tp


def kv_bytes_per_token_layer(arch: Architecture, kv_bytes: float, tp: int = 1) -> float:
    """KV cache for one token in one layer on one GPU of a TP group.

    MLA caches one latent of kv_lora_rank + qk_rope_head_dim values, the same on every TP rank.
    Otherwise K and V for the KV heads of this rank; with more ranks than KV heads each rank
    holds one (replicated) head.
    """
    if arch.kv_lora_rank is not None and arch.qk_rope_head_dim is not None:
        return (arch.kv_lora_rank + arch.qk_rope_head_dim) * kv_bytes
    return 2 * max(1, arch.kv_heads // tp) * arch.head_dim * kv_bytes


def kv_bytes_per_token(arch: Architecture, kv_bytes: float) -> int:
    """The whole model, every layer: 2 × layers × kv_heads × head_dim × bytes (MLA: latent)."""
    return int(arch.layers * kv_bytes_per_token_layer(arch, kv_bytes))


def seq_bytes_per_gpu(w: Workload, tp: int, pp: int) -> float:
    """KV cache for one max_model_len sequence on the fullest stage's GPUs.

    Sliding-window layers keep at most window - 1 + in-flight tokens (vLLM's SlidingWindowSpec:
    in flight = max_num_batched_tokens × concurrent batches, 2 with async scheduling, PP with PP).
    """
    arch = w.arch
    stage_layers = math.ceil(arch.layers / pp)
    window_layers = 0
    window_tokens = w.max_model_len
    if arch.sliding_window is not None and arch.sliding_window_layers is not None:
        window_layers = round(stage_layers * arch.sliding_window_layers / arch.layers)
        in_flight = w.max_num_batched_tokens * max(2, pp)
        window_tokens = min(w.max_model_len, arch.sliding_window - 1 + in_flight)
    per_layer = kv_bytes_per_token_layer(arch, w.kv_bytes, tp)
    full_layers = stage_layers - window_layers
    return per_layer * (full_layers * w.max_model_len + window_layers * window_tokens)


def ffn_width(arch: Architecture) -> int:
    """The FFN width one token passes through: dense, or the experts it is routed to."""
    if arch.moe is not None and arch.moe.moe_intermediate_size is not None:
        return arch.moe.moe_intermediate_size * (
            arch.moe.experts_per_token + arch.moe.shared_experts
        )
    return arch.intermediate_size or 4 * arch.hidden_size


def overhead_bytes(w: Workload, tp: int, pp: int) -> float:
    """Activations + non-torch memory + communication buffers + CUDA graphs, per GPU."""
    arch = w.arch
    hidden = ACTIVATION_HIDDEN_VECTORS * arch.hidden_size
    ffn = ACTIVATION_FFN_VECTORS * ffn_width(arch) / tp
    activations = w.max_num_batched_tokens * (hidden + ffn) * w.dtype_bytes
    logits = LOGITS_COPIES * min(w.max_num_seqs, w.max_num_batched_tokens) * arch.vocab_size * 4
    fixed = NON_TORCH_GIB
    if tp * pp > 1:
        fixed += COMMS_GIB
    if not w.engine("enforce_eager"):
        fixed += CUDA_GRAPHS_GIB
    fixed += w.overhead_correction_gib
    return activations + logits + fixed * GIB


def load_peak_bytes(w: Workload, tp: int, pp: int) -> float:
    """Per-GPU peak while loading with `quantization: fp8` (quantized on load): the stage's
    weights at the checkpoint's precision.

    vLLM up to 0.14 allocates every layer at the checkpoint dtype and quantizes after loading
    (its FP8 docs: "we load the model at original precision before quantizing down to 8-bits");
    0.13 and 0.14 need even more (PR #32773). From PR #31914 (weights created on the meta
    device and quantized as each layer arrives, documented in PR #37851) the peak is about the
    FP8 weights. The [gpu] extra allows vllm>=0.10, so the planner takes the older peak.
    VLLM_OFFLOAD_WEIGHTS_BEFORE_QUANT (PR #19967) was never merged: no release reads it.
    """
    # Only the preset's own online FP8; an alternative format the planner tries is a checkpoint.
    if w.preset.quantization != "fp8" or w.fmt is None or w.fmt.label != "fp8":
        return 0.0
    return weights_per_gpu_bytes(w.with_format(None), tp, pp)


def sizing(w: Workload, tp: int, pp: int) -> Sizing:
    offload = float(w.engine("cpu_offload_gb") or 0.0) * GIB
    return Sizing(
        load_peak=load_peak_bytes(w, tp, pp),
        gpu_total=w.gpu.memory_gib * GIB,
        weights=max(0.0, weights_per_gpu_bytes(w, tp, pp) - offload),
        overhead=overhead_bytes(w, tp, pp),
        seq=seq_bytes_per_gpu(w, tp, pp),
        usable=w.gpu.memory_gib * w.preset.gpu_memory_utilization * GIB,
    )
