"""Capacity planner: the smallest valid layout that fits, the figures behind it, and advice.

The memory model lives in planning/memory.py, vLLM's layout rules in planning/parallelism.py;
docs/planner.md explains both with their sources.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from evalpipe.catalog import modelconfig
from evalpipe.catalog.gpus import Gpu
from evalpipe.catalog.preset import Preset
from evalpipe.core.configio import missing_fields
from evalpipe.core.errors import ConfigError, DoesNotFitError, LayoutError
from evalpipe.planning.memory import (
    GIB,
    WEIGHT_FORMATS,
    WEIGHT_QUANT_STEPS,
    Sizing,
    WeightFormat,
    Workload,
    kv_bytes_per_token,
    sizing,
    weights_bytes,
)
from evalpipe.planning.parallelism import Layout, candidates, check_pp, check_tp, place, tp_nodes
from evalpipe.planning.parallelism import replicas as place_replicas

# An automatic layout must leave this share of usable memory free beyond one full-length
# sequence: it absorbs the error of the overhead estimate.
HEADROOM_FRACTION = 0.05
# The smallest larger GPUs named when nothing fits.
MAX_GPU_IDEAS = 3


# What the planner suggests when nothing fits: (format, how to get it). The formats vLLM makes
# on load come first, in the OOM ladder's order (memory.WEIGHT_QUANT_STEPS), then checkpoints.
SMALLER_FORMATS: tuple[tuple[WeightFormat, str], ...] = (
    *((step.fmt, step.how) for step in WEIGHT_QUANT_STEPS),
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
    gpus_per_node: int  # GPUs the job uses on each node, every replica's
    total_gpus: int  # every replica's
    replicas: int = 1  # copies of the model side by side on the node (data parallel)
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
    # Peak per GPU while loading, when vLLM quantizes on load (memory.load_peak_bytes); 0 else.
    load_peak_per_gpu_gib: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["notes"] = list(self.notes)
        return data

    @classmethod
    def from_dict(cls, data: Any) -> Plan:
        """A plan as `to_dict` wrote it (plan.json); fields added later read with their
        defaults, keys this version does not know are ignored. ValueError when incomplete."""
        if not isinstance(data, dict):
            raise ValueError(f"a plan must be a JSON object, not {type(data).__name__}")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        known = {k: v for k, v in data.items() if k in fields}
        missing = missing_fields(cls, known)
        if missing:
            raise ValueError(f"a plan lacks {', '.join(missing)}")
        return cls(**known | {"notes": tuple(known.get("notes") or ())})


def comfortable(size: Sizing) -> bool:
    """Room for one full-length sequence plus the headroom an automatic layout wants."""
    return size.load_fits and size.kv_space - size.seq >= HEADROOM_FRACTION * size.usable


def _search(
    work: Workload, tp: int | None, pp: int | None, gpus_per_node: int, max_nodes: int | None
) -> tuple[Layout | None, Layout | None]:
    """(the first layout with headroom, else the first that fits at all, else None;
    the largest allowed layout, None when nothing is allowed)."""
    first_fit = largest = None
    for layout in candidates(work.arch, tp, pp, gpus_per_node, max_nodes):
        size = sizing(work, layout.tp, layout.pp)
        if comfortable(size):
            return layout, layout
        if size.fits and first_fit is None:
            first_fit = layout
        largest = layout
    return first_fit, largest


def _gib(value: float) -> float:
    return round(value / GIB, 3)


def _format_of(preset: Preset) -> WeightFormat | None:
    return None if preset.quantization == "none" else WEIGHT_FORMATS[preset.quantization]


def _shortfall(work: Workload, layout: Layout) -> str:
    size = sizing(work, layout.tp, layout.pp)
    return (
        f"at {layout} each GPU needs {_gib(size.weights):.1f} GiB of weights + "
        f"{_gib(size.overhead):.1f} GiB runtime overhead + {_gib(size.seq):.2f} GiB of KV cache "
        f"for one {work.max_model_len}-token sequence, but only {_gib(size.usable):.1f} GiB is "
        "usable "
        f"({work.gpu.memory_gib:g} GiB × {work.preset.gpu_memory_utilization:g})"
    )


def _what_would_fit(
    work: Workload,
    layout: Layout,
    tp: int | None,
    pp: int | None,
    gpus_per_node: int,
    max_nodes: int | None,
    alternatives: Sequence[Gpu],
) -> list[str]:
    """Ways out, each with its price: a larger GPU, smaller weights, CPU offload, shorter len."""
    ideas = []
    larger = [
        gpu
        for gpu in sorted(alternatives, key=lambda gpu: gpu.memory_gib)
        # A cpu entry is a host for calibration, not hardware anyone should buy for the model.
        if gpu.is_gpu and gpu.memory_gib > work.gpu.memory_gib
    ]
    for other in larger:
        found, _ = _search(work.with_gpu(other), tp, pp, gpus_per_node, max_nodes)
        if found:
            ideas.append(f"a larger GPU: {other.name} ({other.memory_gib:g} GiB) with {found}")
        if len(ideas) == MAX_GPU_IDEAS:
            break
    if tp is not None or pp is not None:
        found, _ = _search(work, None, None, gpus_per_node, max_nodes)
        if found and (found.tp, found.pp) != (tp, pp):
            ideas.append(f"a wider layout: --tp {found.tp} --pp {found.pp} gives {found}")
    if max_nodes is not None:
        found, _ = _search(work, tp, pp, gpus_per_node, None)
        if found and found.nodes > max_nodes:
            ideas.append(f"more nodes: --max-nodes {found.nodes} gives {found}")
    current = weights_bytes(work.arch, work.dtype_bytes, work.fmt)
    for fmt, how in SMALLER_FORMATS:
        smaller = work.with_format(fmt)
        saved = current - weights_bytes(work.arch, work.dtype_bytes, fmt)
        if saved <= 0.01 * current:
            continue
        found, _ = _search(smaller, tp, pp, gpus_per_node, max_nodes)
        outcome = f"fits with {found}" if found else "still does not fit"
        if fmt.label == "fp8" and not work.gpu.fp8:
            outcome += f" (weight-only FP8 Marlin kernel: {work.gpu.name} has no FP8 tensor cores)"
        ideas.append(
            f"{fmt.label} weights via {how}: saves {_gib(saved):.1f} GiB of the model's "
            f"{_gib(current):.1f} GiB; {outcome}"
        )
    size = sizing(work, layout.tp, layout.pp)
    offload = (
        size.weights + size.overhead + size.seq + HEADROOM_FRACTION * size.usable - size.usable
    )
    if 0 < offload < size.weights:
        ideas.append(
            f"engine_kwargs: {{cpu_offload_gb: {math.ceil(offload / GIB)}}} with {layout} "
            "(SLOW: that many GiB of weights per GPU cross PCIe on every forward pass)"
        )
    per_token = size.seq / work.max_model_len
    if size.kv_space > 0 and per_token:
        shorter = math.floor(size.kv_space / per_token / 256) * 256
        if 0 < shorter < work.max_model_len:
            ideas.append(f"--max-model-len {shorter} with {layout} (one sequence then fits)")
    return ideas


def _notes(work: Workload, layout: Layout, size: Sizing, gpus_per_node: int) -> list[str]:
    arch = work.arch
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
            f"there (max_num_batched_tokens={work.max_num_batched_tokens}), so they cost a "
            "bounded amount per sequence; kv_cache_bytes_per_token counts every layer"
        )
    if work.fmt is not None and work.preset.quantization == "fp8" and not work.gpu.fp8:
        notes.append(
            f"{work.gpu.name} has no FP8 tensor cores: vLLM runs FP8 weights with its weight-only "
            "Marlin kernel (memory saved, compute in 16-bit)"
        )
    if size.load_peak:
        notes.append(
            f"quantization: fp8 is applied on load: each GPU first holds its "
            f"{_gib(size.load_peak):.1f} GiB of {work.preset.dtype} weights "
            "(vLLM before PR #31914; the [gpu] extra allows those versions), so the layout is "
            "sized for that peak too"
        )
    if work.preset.kv_cache_dtype.startswith("fp8") and not work.gpu.fp8:
        notes.append(
            f"kv_cache_dtype {work.preset.kv_cache_dtype} on {work.gpu.name} (no native FP8)"
        )
    if float(work.engine("cpu_offload_gb") or 0) > 0:
        notes.append(
            f"cpu_offload_gb={work.engine('cpu_offload_gb')}: weights stream from CPU memory on "
            "every forward pass (slow)"
        )
    spanned = tp_nodes(layout)
    if layout.nodes > 1:
        across = "TP groups" if spanned > 1 else "PP stages"
        notes.append(
            f"{layout.nodes} nodes: {across} span nodes, so vLLM needs "
            "distributed_executor_backend='ray' and a Ray cluster across the job's nodes"
        )
    if spanned > 1:
        notes.append(
            f"interconnect: TP={layout.tp} spans {spanned} nodes of {layout.gpus_per_node} GPUs, "
            "so every layer's all-reduce crosses the network twice per token; worth it only "
            "with a fast interconnect (InfiniBand/RoCE at hundreds of Gbit/s), else prefer "
            f"--tp {layout.gpus_per_node} --pp {layout.pp * spanned} (vLLM's multi-node docs)"
        )
    idle = gpus_per_node - layout.gpus_per_node
    if layout.nodes > 1 and idle > 0:
        notes.append(f"{idle} GPU(s) per node stay idle: no wider valid TP fits in a node")
    if size.fits and not comfortable(size):
        notes.append(
            f"tight: less than {HEADROOM_FRACTION:.0%} of usable memory is left beyond one "
            "full-length sequence; vLLM may refuse to start if the estimate is low"
        )
    notes += _long_context_notes(work, size)
    if size.seqs > work.max_num_seqs:
        notes.append(
            f"the KV cache holds {size.seqs} full-length sequences; the scheduler runs at most "
            f"max_num_seqs={work.max_num_seqs} at once"
        )
    margin = work.gpu.memory_gib * (1 - work.preset.gpu_memory_utilization)
    if margin < 1.0:
        notes.append(
            f"gpu_memory_utilization {work.preset.gpu_memory_utilization:g} leaves "
            f"{margin:.2f} GiB outside vLLM's budget for the CUDA context and NCCL (about "
            "0.5-1 GiB); vLLM refuses to start when free memory is below its budget"
        )
    return notes


def _long_context_notes(work: Workload, size: Sizing) -> list[str]:
    """What a run past the model's native context gets: rope scaling, and full-length
    sequences that are few beside the scheduler's max_num_seqs."""
    arch = work.arch
    if work.max_model_len <= arch.native_context:
        return []
    notes = []
    if arch.rope_scaling is not None:
        notes.append(
            f"max_model_len {work.max_model_len} exceeds the native {arch.native_context} "
            f"positions: vLLM gets the card's rope scaling ({arch.rope_scaling.describe()}) "
            "for this run; it is static, and the model card warns it may lower scores on short "
            "texts: run short tasks in a job of their own, at most "
            f"{arch.native_context} tokens"
        )
    if 0 < size.seqs < work.max_num_seqs:
        notes.append(
            f"at {work.max_model_len} tokens the KV cache holds {size.seqs} full-length "
            f"sequence(s): vLLM admits requests by free KV blocks, so that many of the longest "
            f"run at once (max_num_seqs={work.max_num_seqs} bounds the shorter ones)"
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
    overhead_correction_gib: float = 0.0,
    replicas: int | None = 1,
) -> Plan:
    """Size `preset` on `gpu`: the layout (explicit or the smallest that fits) and its memory.

    tp/pp None take the preset's value, and "auto" there means search. Raises LayoutError for a
    layout vLLM would refuse and DoesNotFitError when no allowed layout holds the model (its
    message lists what would: `alternatives` are the larger GPUs to consider). An explicit
    layout that is valid but too small comes back with fits=False and the same advice in notes.
    With read_model_config, a config.json found locally is compared with the preset.
    `overhead_correction_gib` is added to every GPU's runtime overhead (a site's measured
    correction, see `evalpipe smoke`).
    `replicas` copies of the model run side by side on a node; None fills the node with them.
    """
    if gpus_per_node <= 0:
        raise LayoutError(f"GPUs per node must be a positive integer, got {gpus_per_node}.")
    if max_nodes is not None and max_nodes <= 0:
        raise LayoutError(f"The node limit must be a positive integer, got {max_nodes}.")
    arch = preset.architecture
    length = max_model_len or preset.max_model_len
    check_length(preset, length)
    tp = tp if tp is not None else _int_or_none(preset.tensor_parallel)
    pp = pp if pp is not None else _int_or_none(preset.pipeline_parallel)
    work = Workload(
        preset=preset,
        fmt=_format_of(preset),
        gpu=gpu,
        max_model_len=length,
        overhead_correction_gib=overhead_correction_gib,
    )
    if tp is not None:
        check_tp(preset, tp, gpus_per_node)
    if pp is not None:
        check_pp(preset, pp)

    notes: list[str] = []
    if tp is not None and pp is not None:
        layout = place(tp, pp, gpus_per_node)
        if max_nodes is not None and layout.nodes > max_nodes:
            raise LayoutError(
                f"{layout} needs {layout.nodes} nodes, more than the limit of {max_nodes}. "
                "Lower the TP or PP size, or allow more nodes."
            )
        size = sizing(work, tp, pp)
        if not size.fits:
            notes.append(f"does not fit: {_shortfall(work, layout)}")
            ideas = _what_would_fit(work, layout, tp, pp, gpus_per_node, max_nodes, alternatives)
            notes += [f"option: {idea}" for idea in ideas]
    else:
        found, largest = _search(work, tp, pp, gpus_per_node, max_nodes)
        if found is None:
            raise _does_not_fit(work, largest, tp, pp, gpus_per_node, max_nodes, alternatives)
        layout = found
        size = sizing(work, layout.tp, layout.pp)
    notes += _notes(work, layout, size, gpus_per_node)
    copies, replica_notes = place_replicas(layout, replicas, gpus_per_node)
    notes += replica_notes
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
        gpus_per_node=layout.gpus_per_node * copies,
        total_gpus=layout.total * copies,
        replicas=copies,
        quantization=preset.quantization,
        kv_cache_dtype=preset.kv_cache_dtype,
        weights_gib=_gib(weights_bytes(arch, work.dtype_bytes, work.fmt)),
        weights_per_gpu_gib=_gib(size.weights),
        kv_cache_bytes_per_token=kv_bytes_per_token(arch, work.kv_bytes),
        kv_cache_per_seq_gib=_gib(size.seq),
        kv_cache_per_gpu_gib=_gib(max(0.0, size.kv_space)),
        overhead_per_gpu_gib=_gib(size.overhead),
        usable_per_gpu_gib=_gib(size.usable),
        max_model_len=length,
        max_concurrent_seqs=size.seqs,
        fits=size.fits,
        notes=tuple(notes),
        load_peak_per_gpu_gib=_gib(size.load_peak),
    )


def check_length(preset: Preset, length: int) -> None:
    """ConfigError unless the model can hold `length` tokens: its max_position_embeddings, or
    the rope-scaled length where the preset configures the card's rope scaling."""
    arch = preset.architecture
    if 0 < length <= arch.context_ceiling:
        return
    native = arch.max_position_embeddings
    if length <= 0:
        why = "a context must hold at least one token"
    elif arch.rope_scaling is None:
        why = (
            f"{preset.name} was trained for {native} positions (max_position_embeddings) and "
            "its preset configures no rope scaling, so vLLM refuses longer lengths. Plan at "
            f"most {native} (--max-model-len, or shorter task lengths), or, where the model "
            "card documents rope scaling (YaRN) for longer contexts, add it to the preset's "
            'architecture.rope_scaling (docs/planner.md, "Long contexts")'
        )
    else:
        why = (
            f"{preset.name} reaches {arch.context_ceiling} positions with its rope scaling "
            f"({arch.rope_scaling.describe()}), {native} without. Plan at most "
            f"{arch.context_ceiling} (--max-model-len, or shorter task lengths)"
        )
    raise ConfigError(f"max_model_len {length} is outside 1..{arch.context_ceiling}: {why}.")


def _int_or_none(value: int | str) -> int | None:
    return value if isinstance(value, int) else None


def _does_not_fit(
    work: Workload,
    largest: Layout | None,
    tp: int | None,
    pp: int | None,
    gpus_per_node: int,
    max_nodes: int | None,
    alternatives: Sequence[Gpu],
) -> DoesNotFitError:
    limits = f"{gpus_per_node} GPU{'s' if gpus_per_node > 1 else ''} per node"
    if max_nodes is not None:
        limits += f", at most {max_nodes} node(s)"
    if tp is not None:
        limits += f", TP={tp}"
    if pp is not None:
        limits += f", PP={pp}"
    if largest is None:
        return DoesNotFitError(f"{work.preset.name}: no layout is allowed with {limits}.")
    ideas = _what_would_fit(work, largest, tp, pp, gpus_per_node, max_nodes, alternatives)
    advice = "".join(f"\n  - {idea}" for idea in ideas) or "\n  - nothing in the catalogue"
    return DoesNotFitError(
        f"{work.preset.name} does not fit on {work.gpu.name} with {limits}: "
        f"{_shortfall(work, largest)}. Options:{advice}"
    )
