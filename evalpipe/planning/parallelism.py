"""vLLM's parallel layout rules: valid TP sizes, TP/PP placement on nodes, validation (pure)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from evalpipe.catalog.preset import Architecture, Preset
from evalpipe.core.errors import LayoutError


@dataclass(frozen=True, kw_only=True)
class Layout:
    """TP × PP GPUs, placed as `nodes` nodes of `gpus_per_node` GPUs each."""

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
    """Put TP groups inside nodes and as many whole PP stages per node as fit, evenly. A TP
    group wider than a node (asked for explicitly, see check_tp) fills whole nodes."""
    if tp > gpus_per_node:
        return Layout(tp=tp, pp=pp, nodes=pp * tp // gpus_per_node, gpus_per_node=gpus_per_node)
    stages_per_node = max(d for d in range(1, pp + 1) if pp % d == 0 and d * tp <= gpus_per_node)
    return Layout(tp=tp, pp=pp, nodes=pp // stages_per_node, gpus_per_node=stages_per_node * tp)


def tp_nodes(layout: Layout) -> int:
    """How many nodes one TP group spans (1 unless an explicit TP is wider than a node)."""
    return max(1, layout.tp // layout.gpus_per_node)


def replicas(layout: Layout, requested: int | None, gpus_per_node: int) -> tuple[int, list[str]]:
    """How many copies of the model a job runs side by side on its node (data parallel), and
    notes. None fills the node: gpus_per_node // (TP × PP). A model that spans nodes runs one
    copy; across nodes, array shards are the way to scale further."""
    per = layout.total
    if layout.nodes > 1:
        if requested not in (None, 1):
            raise LayoutError(
                f"--replicas {requested}: {layout} already spans {layout.nodes} nodes, and "
                "replicas share one node. Run more copies with --shards N (one job each)."
            )
        return 1, []
    if requested is not None and requested < 1:
        raise LayoutError(f"--replicas must be 1 or more, got {requested}.")
    count = gpus_per_node // per if requested is None else requested
    if count * per > gpus_per_node:
        raise LayoutError(
            f"--replicas {count} × {per} GPU(s) each ({layout}) needs {count * per} GPUs; a "
            f"node has {gpus_per_node}. Use at most --replicas {gpus_per_node // per}, or "
            "--shards to spread copies over jobs."
        )
    notes = []
    idle = gpus_per_node - count * per
    if idle:
        why = "as asked" if requested is not None else f"{per} does not divide {gpus_per_node}"
        notes.append(f"{idle} GPU(s) of the node stay idle with {count} replica(s): {why}")
    return count, notes


def check_tp(preset: Preset, tp: int, gpus_per_node: int) -> None:
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
    # vLLM runs a TP group across nodes over Ray (its multi-node docs show TP=16 on two 8-GPU
    # nodes); evalpipe's job asks every node for the same GPUs, so the group fills whole nodes.
    if tp > gpus_per_node and tp % gpus_per_node:
        raise LayoutError(
            f"Tensor parallel size {tp} exceeds the {gpus_per_node} GPUs per node without "
            f"filling whole nodes: a TP group across nodes must use every GPU of each node it "
            f"spans. Use a multiple of {gpus_per_node} (e.g. --tp "
            f"{math.ceil(tp / gpus_per_node) * gpus_per_node}), or a TP of at most "
            f"{gpus_per_node} and pipeline parallelism across nodes (e.g. --tp {gpus_per_node} "
            f"--pp {math.ceil(tp / gpus_per_node)})."
        )


def check_pp(preset: Preset, pp: int) -> None:
    layers = preset.architecture.layers
    if pp <= 0:
        raise LayoutError(f"The pipeline parallel size must be a positive integer, got {pp}.")
    if pp > layers:
        raise LayoutError(
            f"Pipeline parallel size {pp} exceeds the {layers} layers of {preset.name}: "
            f"every stage needs at least one layer. Use a PP of at most {layers}."
        )


def candidates(
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
