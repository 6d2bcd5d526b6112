"""Calibration records: what `evalpipe smoke` measured for one preset × GPU × layout, beside
the planner's prediction; written as JSON, read back by `load_calibrations`, shown as a table."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from evalpipe.core.errors import RunDirError
from evalpipe.core.textable import format_table
from evalpipe.rundir.samplelog import write_json

SCHEMA = 1
SUFFIX = ".calibration.json"
SHARED_FOLDER = "calibrations"  # under the cluster's cache_dir (EVALPIPE_CACHE)


@dataclass(frozen=True, kw_only=True)
class DeviceMemory:
    """One device after the load: NVML's readings (the CPU's here) and the engine's KV cache."""

    device: str  # gpuN, or cpu where there is no GPU
    total_gib: float | None
    used_before_gib: float | None  # before the engine loaded
    used_after_gib: float | None  # after the load, the KV cache allocated
    kv_cache_gib: float  # the engine's KV capacity (tokens) × bytes per token on this device

    @property
    def loaded_gib(self) -> float | None:
        """What the load added: weights + KV cache + activations/graphs/runtime."""
        if self.used_before_gib is None or self.used_after_gib is None:
            return None
        return self.used_after_gib - self.used_before_gib

    @property
    def weights_and_overhead_gib(self) -> float | None:
        loaded = self.loaded_gib
        return None if loaded is None else loaded - self.kv_cache_gib

    @property
    def free_gib(self) -> float | None:
        if self.total_gib is None or self.used_after_gib is None:
            return None
        return self.total_gib - self.used_after_gib


@dataclass(frozen=True, kw_only=True)
class Planned:
    """The planner's figures per GPU for the same preset, GPU and layout."""

    weights_gib: float
    kv_cache_gib: float
    overhead_gib: float
    kv_cache_tokens: int


@dataclass(frozen=True, kw_only=True)
class ProbePoint:
    """Throughput at one batch size: prefill (one token out) and decode (the rest)."""

    batch: int
    prompt_tokens: int
    completion_tokens: int
    prefill_tok_s: float
    decode_tok_s: float | None  # None when nothing was decoded past the first token


@dataclass(frozen=True, kw_only=True)
class Calibration:
    preset: str
    gpu: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    backend: str
    host: str
    created_at: str
    phases_s: dict[str, float]  # import, load, first_token
    kv_cache_tokens: int | None  # the engine's own capacity; None if it does not say
    planned: Planned
    devices: tuple[DeviceMemory, ...]
    probe: tuple[ProbePoint, ...]
    answers: dict[str, str] = field(default_factory=dict)  # prompt kind → answer
    schema: int = SCHEMA

    @property
    def layout(self) -> str:
        return f"tp{self.tensor_parallel_size}-pp{self.pipeline_parallel_size}"

    @property
    def file_name(self) -> str:
        return f"{self.preset}-{self.gpu}-{self.layout}{SUFFIX}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Calibration:
        if data.get("schema") != SCHEMA:
            raise ValueError(f"calibration schema {data.get('schema')!r}, expected {SCHEMA}")
        return cls(
            **{
                **data,
                "planned": Planned(**data["planned"]),
                "devices": tuple(DeviceMemory(**d) for d in data["devices"]),
                "probe": tuple(ProbePoint(**p) for p in data["probe"]),
            }
        )

    def write(self, run_dir: Path, shared_dir: Path | None = None) -> list[Path]:
        """Into the run directory, and into SHARED_DIR/calibrations/ when given."""
        paths = [run_dir / self.file_name]
        if shared_dir is not None:
            paths.append(shared_dir / SHARED_FOLDER / self.file_name)
        for path in paths:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json(path, self.to_dict())
        return paths


def load_calibrations(paths: Iterable[Path]) -> list[Calibration]:
    """Every calibration record in `paths` (files, or folders holding *.calibration.json)."""
    found: list[Calibration] = []
    for path in paths:
        files = sorted(path.glob(f"*{SUFFIX}")) if path.is_dir() else [path]
        for file in files:
            try:
                found.append(Calibration.from_dict(json.loads(file.read_text(encoding="utf-8"))))
            except (OSError, ValueError, TypeError, KeyError) as exc:
                raise RunDirError(
                    f"{file} is not a calibration record evalpipe can read ({exc}); "
                    "run `evalpipe smoke` again to rewrite it."
                ) from exc
    return found


def _gib(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _off(measured: float | None, planned: float) -> str:
    if measured is None:
        return "-"
    delta = measured - planned
    pct = f" ({delta / planned:+.0%})" if planned else ""
    return f"{delta:+.2f}{pct}"


def table(cal: Calibration) -> str:
    """The smoke report: memory per device beside the plan, KV capacity, throughput, phases."""
    p = cal.planned
    memory = format_table(
        ("device", "total", "used", "free", "KV", "plan KV", "weights+overhead", "plan w+o", "off"),
        [
            (
                d.device,
                _gib(d.total_gib),
                _gib(d.used_after_gib),
                _gib(d.free_gib),
                _gib(d.kv_cache_gib),
                _gib(p.kv_cache_gib),
                _gib(d.weights_and_overhead_gib),
                _gib(p.weights_gib + p.overhead_gib),
                _off(d.weights_and_overhead_gib, p.weights_gib + p.overhead_gib),
            )
            for d in cal.devices
        ],
    )
    probe = format_table(
        ("batch", "prompt tok", "prefill tok/s", "decode tok/s"),
        [
            (
                q.batch,
                q.prompt_tokens,
                f"{q.prefill_tok_s:.1f}",
                "-" if q.decode_tok_s is None else f"{q.decode_tok_s:.1f}",
            )
            for q in cal.probe
        ],
    )
    kv = "-" if cal.kv_cache_tokens is None else str(cal.kv_cache_tokens)
    kv_off = (
        ""
        if cal.kv_cache_tokens is None or not p.kv_cache_tokens
        else f" ({cal.kv_cache_tokens / p.kv_cache_tokens - 1:+.0%} vs plan)"
    )
    phases = ", ".join(f"{k} {v:.2f} s" for k, v in cal.phases_s.items())
    return (
        f"smoke: {cal.preset} on {cal.gpu} ({cal.layout}, {cal.backend}) on {cal.host}\n"
        f"phases: {phases}\n"
        f"KV cache: {kv} tokens, planned {p.kv_cache_tokens}{kv_off}\n"
        f"memory per device, GiB (off: measured minus planned):\n{memory}\n"
        f"throughput:\n{probe}\n"
    )
