"""Plan a local run (`evalpipe run` outside a planned job) from what this machine has: the GPUs
NVML sees after CUDA_VISIBLE_DEVICES, matched to the catalogue, or the CPU engine."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from evalpipe.catalog.gpus import Gpu, load_gpus
from evalpipe.catalog.preset import Preset
from evalpipe.core.errors import ConfigError, DoesNotFitError
from evalpipe.monitor.visible_gpus import visible_devices
from evalpipe.planning import planner
from evalpipe.run.replicas import core_slices, device_slices


@dataclass(frozen=True, kw_only=True)
class LocalLayout:
    """The engine layout of a local run and each replica's environment slice."""

    tp: int
    pp: int
    replicas: int
    envs: tuple[dict[str, str], ...]  # one per replica; empty for one in-process engine
    device: str  # what it runs on, for the log
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class LocalGpu:
    entry: str  # how CUDA_VISIBLE_DEVICES names it (index or UUID), for a replica's slice
    name: str  # NVML's device name
    memory_gib: float


def visible_gpus(nvml: Any = None) -> list[LocalGpu]:
    """The GPUs this process may use (CUDA's rules); [] when NVML is missing or sees none."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            return []
    try:
        nvml.nvmlInit()
    except Exception:  # NVMLError, or no driver library at all
        return []
    try:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        gpus = visible_devices(nvml, visible, device_order=os.environ.get("CUDA_DEVICE_ORDER"))
        entries = [e.strip() for e in visible.split(",")] if visible else []
        return [
            LocalGpu(
                entry=entries[g.ordinal] if entries else str(g.ordinal),
                name=g.name,
                memory_gib=nvml.nvmlDeviceGetMemoryInfo(g.handle).total / 2**30,
            )
            for g in gpus
        ]
    finally:
        nvml.nvmlShutdown()


def catalogue_gpu(name: str, memory_gib: float, gpus: Sequence[Gpu]) -> Gpu:
    """The catalogue entry NVML's device name (and, to tell variants apart, memory) names."""
    named = [g for g in gpus if g.device_name == name]
    if not named:
        known = ", ".join(sorted({g.device_name for g in gpus if g.device_name}))
        raise ConfigError(
            f"The visible GPU {name!r} is not in the GPU catalogue (known: {known}). Add it to "
            "configs/gpus.yaml, or pass --tp, --pp and --replicas to skip planning."
        )
    return min(named, key=lambda g: abs(g.memory_gib - memory_gib))


def plan_local(
    preset: Preset,
    *,
    tp: int | None,
    pp: int | None,
    replicas: int | None,
    max_model_len: int | None,
    gpus: Sequence[LocalGpu] | None = None,
) -> LocalLayout:
    """The layout for a run on this machine. With GPUs visible, TP/PP `auto` and replicas come
    from the planner on those GPUs (a clear error when the model does not fit them); without,
    the CPU engine runs the preset's or the given TP/PP with one replica unless asked."""
    gpus = visible_gpus() if gpus is None else gpus
    if not gpus:
        layout_tp = tp or _fixed(preset.tensor_parallel)
        layout_pp = pp or _fixed(preset.pipeline_parallel)
        count = replicas or 1
        cores = sorted(os.sched_getaffinity(0))
        envs = tuple(core_slices(count, cores)) if count > 1 else ()
        return LocalLayout(
            tp=layout_tp,
            pp=layout_pp,
            replicas=count,
            envs=envs,
            device=f"cpu ({len(cores)} cores)",
        )
    visible = [g.entry for g in gpus]
    if tp is not None and pp is not None and replicas is not None:  # planned already (a job)
        envs = tuple(device_slices(replicas, tp * pp, visible)) if replicas > 1 else ()
        device = f"{len(gpus)} × {gpus[0].name}"
        return LocalLayout(tp=tp, pp=pp, replicas=replicas, envs=envs, device=device)
    gpu = catalogue_gpu(gpus[0].name, gpus[0].memory_gib, list(load_gpus().values()))
    try:
        plan = planner.plan(
            preset,
            gpu,
            gpus_per_node=len(gpus),
            tp=tp,
            pp=pp,
            max_model_len=max_model_len,
            max_nodes=1,
            replicas=replicas,
        )
    except DoesNotFitError as exc:
        raise DoesNotFitError(
            f"{exc}\nThis machine shows {len(gpus)} × {gpu.name} (CUDA_VISIBLE_DEVICES="
            f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})."
        ) from None
    if not plan.fits:
        raise DoesNotFitError(
            f"{preset.name} with TP={plan.tensor_parallel_size} × PP="
            f"{plan.pipeline_parallel_size} does not fit the {len(gpus)} visible {gpu.name}: "
            + "; ".join(plan.notes)
        )
    per = plan.tensor_parallel_size * plan.pipeline_parallel_size
    envs = tuple(device_slices(plan.replicas, per, visible)) if plan.replicas > 1 else ()
    return LocalLayout(
        tp=plan.tensor_parallel_size,
        pp=plan.pipeline_parallel_size,
        replicas=plan.replicas,
        envs=envs,
        device=f"{len(gpus)} × {gpu.name}",
        notes=plan.notes,
    )


def _fixed(value: int | str) -> int:
    return value if isinstance(value, int) else 1
