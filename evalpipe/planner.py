"""Capacity planner: memory model, vLLM's layout rules and the TP/PP/node choice (pure).

Every figure is per GPU unless its name says otherwise. The numbers and their sources are in
docs/planner.md; the constants below carry the same names.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from evalpipe import modelconfig
from evalpipe.errors import ConfigError, DoesNotFitError, LayoutError
from evalpipe.registry import DTYPE_BYTES, Architecture, Gpu, Preset

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
# An automatic layout must leave this share of usable memory free beyond one full-length
# sequence: it absorbs the error of the overhead estimate.
HEADROOM_FRACTION = 0.05


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

# What the planner suggests when nothing fits: (format, how to get it).
SMALLER_FORMATS: tuple[tuple[WeightFormat, str], ...] = (
    (WEIGHT_FORMATS["fp8"], "quantization: fp8 (vLLM quantizes a bf16 checkpoint on load)"),
    (
        WeightFormat(label="int8", bits=8),
        "an int8 checkpoint (GPTQ 8-bit or compressed-tensors W8A16/W8A8)",
    ),
    (WEIGHT_FORMATS["awq"], "an int4 AWQ/GPTQ checkpoint (group size 128)"),
)


@dataclass(frozen=True, kw_only=True)
class Plan:
    """A layout for one preset on one GPU type and the memory figures behind it."""

    preset: str
    model: str
    gpu: str
    gpu_memory_gib: float
    tensor_parallel_size: int
    pipeline_parallel_size: int
    nodes: int
    gpus_per_node: int  # GPUs the job uses on each node
    total_gpus: int
    quantization: str
    kv_cache_dtype: str
    weights_gib: float  # the whole model
    weights_per_gpu_gib: float
    kv_cache_bytes_per_token: int  # the whole model, every layer, before any TP split
    kv_cache_per_seq_gib: float  # one max_model_len sequence, per GPU
    kv_cache_per_gpu_gib: float  # what is left for the KV cache on each GPU
    overhead_per_gpu_gib: float
    usable_per_gpu_gib: float
    max_model_len: int
    max_concurrent_seqs: int
    fits: bool
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["notes"] = list(self.notes)
        return data


@dataclass(frozen=True, kw_only=True)
class Layout:
    tp: int
    pp: int
    nodes: int
    gpus_per_node: int

    @property
    def total(self) -> int:
        return self.tp * self.pp

    def __str__(self) -> str:
        where = f"{self.nodes} nodes × {self.gpus_per_node}" if self.nodes > 1 else "1 node"
        gpus = f"{self.total} GPU{'s' if self.total > 1 else ''}"
        return f"TP={self.tp} × PP={self.pp} ({gpus}, {where})"


@dataclass(frozen=True, kw_only=True)
class _Sizing:
    """Per-GPU memory figures of one layout, in bytes."""

    weights: float
    overhead: float
    seq: float  # one full-length sequence's KV cache
    usable: float

    @property
    def kv_space(self) -> float:
        return self.usable - self.weights - self.overhead

    @property
    def seqs(self) -> int:
        return max(0, math.floor(self.kv_space / self.seq)) if self.seq else 0

    @property
    def fits(self) -> bool:
        return self.seqs >= 1

    @property
    def comfortable(self) -> bool:
        return self.kv_space - self.seq >= HEADROOM_FRACTION * self.usable


@dataclass(frozen=True, kw_only=True)
class _Model:
    """The facts one sizing needs: preset, weight format, GPU, sequence length."""

    preset: Preset
    fmt: WeightFormat | None  # None: unquantized, the preset's dtype
    gpu: Gpu
    max_model_len: int

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
        return int(self.engine("max_num_batched_tokens") or _vllm_defaults(self.gpu)[0])

    @property
    def max_num_seqs(self) -> int:
        return int(self.engine("max_num_seqs") or _vllm_defaults(self.gpu)[1])

    def with_format(self, fmt: WeightFormat | None) -> _Model:
        return dataclasses.replace(self, fmt=fmt)

    def with_gpu(self, gpu: Gpu) -> _Model:
        return dataclasses.replace(self, gpu=gpu)


def _vllm_defaults(gpu: Gpu) -> tuple[int, int]:
    """vLLM's offline (LLM class) max_num_batched_tokens and max_num_seqs for this GPU.

    vllm/engine/arg_utils.py get_batch_defaults: >= 160 GiB, or >= 70 GiB and not an A100, get
    16384 tokens and 1024 sequences; others 8192 and 256.
    """
    big = gpu.memory_gib >= 160 or (
        gpu.memory_gib >= 70 and "a100" not in (gpu.device_name or gpu.name).lower()
    )
    return (16384, 1024) if big else (8192, 256)


# --- memory model -----------------------------------------------------------------------------


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


def weights_per_gpu_bytes(m: _Model, tp: int, pp: int) -> float:
    """The fullest GPU: a stage with ceil(layers/pp) layers plus an embedding matrix.

    vLLM splits layers evenly over PP stages and every matrix over TP ranks. With PP the input
    embedding lives on the first stage and the output head on the last (even when tied).
    """
    arch = m.arch
    layer_share = math.ceil(arch.layers / pp) / arch.layers
    matrices = embedding_matrices(arch) if pp == 1 else 1
    body = body_bytes(arch, m.dtype_bytes, m.fmt) * layer_share
    return (body + matrices * embedding_bytes(arch, m.dtype_bytes)) / tp


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


def seq_bytes_per_gpu(m: _Model, tp: int, pp: int) -> float:
    """KV cache for one max_model_len sequence on the fullest stage's GPUs.

    Sliding-window layers keep at most window - 1 + in-flight tokens (vLLM's SlidingWindowSpec:
    in flight = max_num_batched_tokens × concurrent batches, 2 with async scheduling, PP with PP).
    """
    arch = m.arch
    stage_layers = math.ceil(arch.layers / pp)
    window_layers = 0
    window_tokens = m.max_model_len
    if arch.sliding_window is not None and arch.sliding_window_layers is not None:
        window_layers = round(stage_layers * arch.sliding_window_layers / arch.layers)
        in_flight = m.max_num_batched_tokens * max(2, pp)
        window_tokens = min(m.max_model_len, arch.sliding_window - 1 + in_flight)
    per_layer = kv_bytes_per_token_layer(arch, m.kv_bytes, tp)
    full_layers = stage_layers - window_layers
    return per_layer * (full_layers * m.max_model_len + window_layers * window_tokens)


def ffn_width(arch: Architecture) -> int:
    """The FFN width one token passes through: dense, or the experts it is routed to."""
    if arch.moe is not None and arch.moe.moe_intermediate_size is not None:
        return arch.moe.moe_intermediate_size * (
            arch.moe.experts_per_token + arch.moe.shared_experts
        )
    return arch.intermediate_size or 4 * arch.hidden_size


def overhead_bytes(m: _Model, tp: int, pp: int) -> float:
    """Activations + non-torch memory + communication buffers + CUDA graphs, per GPU."""
    arch = m.arch
    hidden = ACTIVATION_HIDDEN_VECTORS * arch.hidden_size
    ffn = ACTIVATION_FFN_VECTORS * ffn_width(arch) / tp
    activations = m.max_num_batched_tokens * (hidden + ffn) * m.dtype_bytes
    logits = LOGITS_COPIES * min(m.max_num_seqs, m.max_num_batched_tokens) * arch.vocab_size * 4
    fixed = NON_TORCH_GIB
    if tp * pp > 1:
        fixed += COMMS_GIB
    if not m.engine("enforce_eager"):
        fixed += CUDA_GRAPHS_GIB
    return activations + logits + fixed * GIB


def _sizing(m: _Model, tp: int, pp: int) -> _Sizing:
    offload = float(m.engine("cpu_offload_gb") or 0.0) * GIB
    return _Sizing(
        weights=max(0.0, weights_per_gpu_bytes(m, tp, pp) - offload),
        overhead=overhead_bytes(m, tp, pp),
        seq=seq_bytes_per_gpu(m, tp, pp),
        usable=m.gpu.memory_gib * m.preset.gpu_memory_utilization * GIB,
    )


# --- layout rules -----------------------------------------------------------------------------


def tp_problem(arch: Architecture, tp: int) -> str | None:
    """Why vLLM refuses this tensor parallel size, or None.

    vllm/config/model.py: the attention heads must split evenly; vllm/model_executor/layers/
    linear.py (QKVParallelLinear): KV heads are split evenly or replicated whole.
    """
    if arch.attention_heads % tp:
        return f"it does not divide the {arch.attention_heads} attention heads"
    if arch.kv_heads % tp and tp % arch.kv_heads:
        return (
            f"it and the {arch.kv_heads} KV heads must divide one another (vLLM splits or "
            "replicates whole KV heads)"
        )
    return None


def valid_tp_sizes(arch: Architecture, limit: int) -> list[int]:
    return [tp for tp in range(1, limit + 1) if tp_problem(arch, tp) is None]


def place(tp: int, pp: int, gpus_per_node: int) -> Layout:
    """Put TP groups inside nodes and as many whole PP stages per node as fit, evenly."""
    stages_per_node = max(d for d in range(1, pp + 1) if pp % d == 0 and d * tp <= gpus_per_node)
    return Layout(tp=tp, pp=pp, nodes=pp // stages_per_node, gpus_per_node=stages_per_node * tp)


def _check_tp(preset: Preset, tp: int, gpus_per_node: int) -> None:
    arch = preset.architecture
    if tp <= 0:
        raise LayoutError(f"The tensor parallel size must be a positive integer, got {tp}.")
    problem = tp_problem(arch, tp)
    if problem:
        valid = ", ".join(map(str, valid_tp_sizes(arch, gpus_per_node)))
        raise LayoutError(
            f"Tensor parallel size {tp} is invalid for {preset.name}: {problem}; vLLM refuses "
            f"it at startup. Valid TP sizes up to {gpus_per_node} GPUs per node: {valid}."
        )
    if tp > gpus_per_node:
        raise LayoutError(
            f"Tensor parallel size {tp} exceeds the {gpus_per_node} GPUs per node: tensor "
            f"parallelism must stay inside a node. Use a TP of at most {gpus_per_node} and "
            f"pipeline parallelism across nodes (e.g. --tp {gpus_per_node} --pp "
            f"{math.ceil(tp / gpus_per_node)})."
        )


def _check_pp(preset: Preset, pp: int) -> None:
    layers = preset.architecture.layers
    if pp <= 0:
        raise LayoutError(f"The pipeline parallel size must be a positive integer, got {pp}.")
    if pp > layers:
        raise LayoutError(
            f"Pipeline parallel size {pp} exceeds the {layers} layers of {preset.name}: "
            f"every stage needs at least one layer. Use a PP of at most {layers}."
        )


# --- search -----------------------------------------------------------------------------------


def _candidates(
    arch: Architecture, tp: int | None, pp: int | None, gpus_per_node: int, max_nodes: int | None
) -> Iterator[Layout]:
    """Layouts to try, fewest GPUs first, then fewest nodes.

    With both sizes free: TP inside one node, then one PP stage per node with the widest valid
    TP; a size the user fixed stays fixed.
    """
    tps = [tp] if tp is not None else valid_tp_sizes(arch, gpus_per_node)
    if pp is not None:
        pairs: Iterable[tuple[int, int]] = [(t, pp) for t in tps]
    elif tp is not None:
        pairs = [(tp, p) for p in range(1, arch.layers + 1)]
    else:
        pairs = [(t, 1) for t in tps] + [(tps[-1], n) for n in range(2, arch.layers + 1)]
    layouts = [place(t, p, gpus_per_node) for t, p in pairs]
    allowed = [lay for lay in layouts if max_nodes is None or lay.nodes <= max_nodes]
    yield from sorted(allowed, key=lambda lay: (lay.total, lay.nodes, lay.pp))


def _search(
    m: _Model, tp: int | None, pp: int | None, gpus_per_node: int, max_nodes: int | None
) -> tuple[Layout | None, Layout | None]:
    """(the first layout with headroom, else the first that fits at all, else None;
    the largest allowed layout, None when nothing is allowed)."""
    first_fit = largest = None
    for layout in _candidates(m.arch, tp, pp, gpus_per_node, max_nodes):
        s = _sizing(m, layout.tp, layout.pp)
        if s.comfortable:
            return layout, layout
        if s.fits and first_fit is None:
            first_fit = layout
        largest = layout
    return first_fit, largest


def _gib(value: float) -> float:
    return round(value / GIB, 3)


def _format_of(preset: Preset) -> WeightFormat | None:
    return None if preset.quantization == "none" else WEIGHT_FORMATS[preset.quantization]


def _shortfall(m: _Model, layout: Layout) -> str:
    s = _sizing(m, layout.tp, layout.pp)
    return (
        f"at {layout} each GPU needs {_gib(s.weights):.1f} GiB of weights + "
        f"{_gib(s.overhead):.1f} GiB runtime overhead + {_gib(s.seq):.2f} GiB of KV cache for "
        f"one {m.max_model_len}-token sequence, but only {_gib(s.usable):.1f} GiB is usable "
        f"({m.gpu.memory_gib:g} GiB × {m.preset.gpu_memory_utilization:g})"
    )


def _what_would_fit(
    m: _Model,
    layout: Layout,
    tp: int | None,
    pp: int | None,
    gpus_per_node: int,
    max_nodes: int | None,
    alternatives: Sequence[Gpu],
) -> list[str]:
    """Ways out, each with its price: a larger GPU, smaller weights, CPU offload, shorter len."""
    ideas = []
    for other in sorted(alternatives, key=lambda g: g.memory_gib):
        if other.memory_gib <= m.gpu.memory_gib:
            continue
        found, _ = _search(m.with_gpu(other), tp, pp, gpus_per_node, max_nodes)
        if found:
            ideas.append(f"a larger GPU: {other.name} ({other.memory_gib:g} GiB) with {found}")
    current = weights_bytes(m.arch, m.dtype_bytes, m.fmt)
    for fmt, how in SMALLER_FORMATS:
        smaller = m.with_format(fmt)
        saved = current - weights_bytes(m.arch, m.dtype_bytes, fmt)
        if saved <= 0.01 * current:
            continue
        found, _ = _search(smaller, tp, pp, gpus_per_node, max_nodes)
        outcome = f"fits with {found}" if found else "still does not fit"
        ideas.append(
            f"{fmt.label} weights via {how}: saves {_gib(saved):.1f} GiB of the model's "
            f"{_gib(current):.1f} GiB; {outcome}"
        )
    s = _sizing(m, layout.tp, layout.pp)
    offload = s.weights + s.overhead + s.seq + HEADROOM_FRACTION * s.usable - s.usable
    if 0 < offload < s.weights:
        ideas.append(
            f"engine_kwargs: {{cpu_offload_gb: {math.ceil(offload / GIB)}}} with {layout} "
            "(SLOW: that many GiB of weights per GPU cross PCIe on every forward pass)"
        )
    per_token = s.seq / m.max_model_len
    if s.kv_space > 0 and per_token:
        shorter = math.floor(s.kv_space / per_token / 256) * 256
        if 0 < shorter < m.max_model_len:
            ideas.append(f"--max-model-len {shorter} with {layout} (one sequence then fits)")
    return ideas


def _notes(m: _Model, layout: Layout, s: _Sizing, gpus_per_node: int) -> list[str]:
    arch = m.arch
    notes = []
    if arch.moe is not None:
        notes.append(
            f"MoE: all {arch.moe.experts} experts per layer are resident ({arch.params_b:g}B "
            f"parameters), {arch.moe.experts_per_token} run per token "
            f"({arch.moe.active_params_b:g}B active); experts are split over TP ranks"
        )
    if arch.kv_lora_rank is not None and arch.qk_rope_head_dim is not None:
        notes.append(
            f"MLA: the KV cache holds one {arch.kv_lora_rank + arch.qk_rope_head_dim}-value "
            "latent per token and layer, replicated on every TP rank (TP does not shrink it)"
        )
    elif layout.tp > arch.kv_heads:
        notes.append(
            f"TP={layout.tp} exceeds the {arch.kv_heads} KV heads: each KV head is replicated "
            f"on {layout.tp // arch.kv_heads} GPUs, so the KV cache per GPU stops shrinking"
        )
    if arch.sliding_window is not None and arch.sliding_window_layers is not None:
        notes.append(
            f"sliding window: {arch.sliding_window_layers} of {arch.layers} layers attend to "
            f"the last {arch.sliding_window} tokens; vLLM keeps window - 1 + in-flight tokens "
            f"there (max_num_batched_tokens={m.max_num_batched_tokens}), so they cost a "
            "bounded amount per sequence; kv_cache_bytes_per_token counts every layer"
        )
    if m.fmt is not None and m.preset.quantization == "fp8" and not m.gpu.fp8:
        notes.append(
            f"{m.gpu.name} has no FP8 tensor cores: vLLM runs FP8 weights with its weight-only "
            "Marlin kernel (memory saved, compute in 16-bit)"
        )
    if m.preset.kv_cache_dtype.startswith("fp8") and not m.gpu.fp8:
        notes.append(f"kv_cache_dtype {m.preset.kv_cache_dtype} on {m.gpu.name} (no native FP8)")
    if float(m.engine("cpu_offload_gb") or 0) > 0:
        notes.append(
            f"cpu_offload_gb={m.engine('cpu_offload_gb')}: weights stream from CPU memory on "
            "every forward pass (slow)"
        )
    if layout.nodes > 1:
        notes.append(
            f"{layout.nodes} nodes: PP stages span nodes, so vLLM needs "
            "distributed_executor_backend='ray' and a Ray cluster across the job's nodes"
        )
    idle = gpus_per_node - layout.gpus_per_node
    if layout.nodes > 1 and idle > 0:
        notes.append(f"{idle} GPU(s) per node stay idle: no wider valid TP fits in a node")
    if s.fits and not s.comfortable:
        notes.append(
            f"tight: less than {HEADROOM_FRACTION:.0%} of usable memory is left beyond one "
            "full-length sequence; vLLM may refuse to start if the estimate is low"
        )
    if s.seqs > m.max_num_seqs:
        notes.append(
            f"the KV cache holds {s.seqs} full-length sequences; the scheduler runs at most "
            f"max_num_seqs={m.max_num_seqs} at once"
        )
    margin = m.gpu.memory_gib * (1 - m.preset.gpu_memory_utilization)
    if margin < 1.0:
        notes.append(
            f"gpu_memory_utilization {m.preset.gpu_memory_utilization:g} leaves "
            f"{margin:.2f} GiB outside vLLM's budget for the CUDA context and NCCL (about "
            "0.5-1 GiB); vLLM refuses to start when free memory is below its budget"
        )
    return notes


def plan(
    preset: Preset,
    gpu: Gpu,
    *,
    gpus_per_node: int = 8,
    tp: int | None = None,
    pp: int | None = None,
    max_model_len: int | None = None,
    max_nodes: int | None = None,
    alternatives: Sequence[Gpu] = (),
    read_model_config: bool = True,
) -> Plan:
    """Size `preset` on `gpu`: the layout (explicit or the smallest that fits) and its memory.

    tp/pp None take the preset's value, and "auto" there means search. Raises LayoutError for a
    layout vLLM would refuse and DoesNotFitError when no allowed layout holds the model (its
    message lists what would: `alternatives` are the larger GPUs to consider). An explicit
    layout that is valid but too small comes back with fits=False and the same advice in notes.
    With read_model_config, a config.json found locally is compared with the preset.
    """
    if gpus_per_node <= 0:
        raise LayoutError(f"GPUs per node must be a positive integer, got {gpus_per_node}.")
    if max_nodes is not None and max_nodes <= 0:
        raise LayoutError(f"The node limit must be a positive integer, got {max_nodes}.")
    arch = preset.architecture
    length = max_model_len or preset.max_model_len
    if length <= 0 or length > arch.max_position_embeddings:
        raise ConfigError(
            f"max_model_len {length} is outside 1..{arch.max_position_embeddings}, the "
            f"context {preset.name} was trained for (max_position_embeddings); vLLM refuses "
            "longer lengths unless the model's rope scaling extends them. Use at most "
            f"{arch.max_position_embeddings}."
        )
    tp = tp if tp is not None else _int_or_none(preset.tensor_parallel)
    pp = pp if pp is not None else _int_or_none(preset.pipeline_parallel)
    m = _Model(preset=preset, fmt=_format_of(preset), gpu=gpu, max_model_len=length)
    if tp is not None:
        _check_tp(preset, tp, gpus_per_node)
    if pp is not None:
        _check_pp(preset, pp)

    notes: list[str] = []
    if tp is not None and pp is not None:
        layout = place(tp, pp, gpus_per_node)
        if max_nodes is not None and layout.nodes > max_nodes:
            raise LayoutError(
                f"{layout} needs {layout.nodes} nodes, more than the limit of {max_nodes}. "
                "Lower the TP or PP size, or allow more nodes."
            )
        s = _sizing(m, tp, pp)
        if not s.fits:
            notes.append(f"does not fit: {_shortfall(m, layout)}")
            ideas = _what_would_fit(m, layout, tp, pp, gpus_per_node, max_nodes, alternatives)
            notes += [f"would fit: {idea}" for idea in ideas]
    else:
        found, largest = _search(m, tp, pp, gpus_per_node, max_nodes)
        if found is None:
            raise _does_not_fit(m, largest, tp, pp, gpus_per_node, max_nodes, alternatives)
        layout = found
        s = _sizing(m, layout.tp, layout.pp)
    notes += _notes(m, layout, s, gpus_per_node)
    if read_model_config:
        notes += modelconfig.disagreements(preset, modelconfig.find_local(preset))
    return Plan(
        preset=preset.name,
        model=preset.model,
        gpu=gpu.name,
        gpu_memory_gib=gpu.memory_gib,
        tensor_parallel_size=layout.tp,
        pipeline_parallel_size=layout.pp,
        nodes=layout.nodes,
        gpus_per_node=layout.gpus_per_node,
        total_gpus=layout.total,
        quantization=preset.quantization,
        kv_cache_dtype=preset.kv_cache_dtype,
        weights_gib=_gib(weights_bytes(arch, m.dtype_bytes, m.fmt)),
        weights_per_gpu_gib=_gib(s.weights),
        kv_cache_bytes_per_token=kv_bytes_per_token(arch, m.kv_bytes),
        kv_cache_per_seq_gib=_gib(s.seq),
        kv_cache_per_gpu_gib=_gib(max(0.0, s.kv_space)),
        overhead_per_gpu_gib=_gib(s.overhead),
        usable_per_gpu_gib=_gib(s.usable),
        max_model_len=length,
        max_concurrent_seqs=s.seqs,
        fits=s.fits,
        notes=tuple(notes),
    )


def _int_or_none(value: int | str) -> int | None:
    return value if isinstance(value, int) else None


def _does_not_fit(
    m: _Model,
    largest: Layout | None,
    tp: int | None,
    pp: int | None,
    gpus_per_node: int,
    max_nodes: int | None,
    alternatives: Sequence[Gpu],
) -> DoesNotFitError:
    limits = f"{gpus_per_node} GPUs per node"
    if max_nodes is not None:
        limits += f", at most {max_nodes} node(s)"
    if tp is not None:
        limits += f", TP={tp}"
    if pp is not None:
        limits += f", PP={pp}"
    if largest is None:
        return DoesNotFitError(f"{m.preset.name}: no layout is allowed with {limits}.")
    ideas = _what_would_fit(m, largest, tp, pp, gpus_per_node, max_nodes, alternatives)
    advice = "".join(f"\n  - {idea}" for idea in ideas) or "\n  - nothing in the catalogue"
    return DoesNotFitError(
        f"{m.preset.name} does not fit on {m.gpu.name} with {limits}: "
        f"{_shortfall(m, largest)}. What would fit:{advice}"
    )
