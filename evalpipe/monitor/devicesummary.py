"""Per-device summaries: running tallies while sampling, and the DeviceSummary record that
summary.json, the manifest and the reports share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evalpipe.monitor.readings import Reading, Source


@dataclass(frozen=True, kw_only=True)
class DeviceSummary:
    """One device over a run: peak memory, mean utilisation and energy since the run started."""

    device: str  # gpuN (CUDA's numbering inside the job) or cpu
    host: str
    name: str | None = None
    uuid: str | None = None
    peak_memory_gib: float | None = None
    mean_util_pct: float | None = None
    energy_j: float | None = None
    energy_source: str | None = None  # "counter", "integrated", or None (not measured)
    samples: int = 0

    @property
    def is_gpu(self) -> bool:
        return self.device.startswith("gpu")

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "host": self.host,
            "name": self.name,
            "uuid": self.uuid,
            "peak_memory_gib": self.peak_memory_gib,
            "mean_util_pct": self.mean_util_pct,
            "energy_j": self.energy_j,
            "energy_source": self.energy_source,
            "samples": self.samples,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DeviceSummary:
        """A summary as written by any version (missing figures read as unknown)."""
        return cls(
            device=str(data.get("device") or "?"),
            host=str(data.get("host") or "?"),
            name=data.get("name"),
            uuid=data.get("uuid"),
            peak_memory_gib=_float(data.get("peak_memory_gib")),
            mean_util_pct=_float(data.get("mean_util_pct")),
            energy_j=_float(data.get("energy_j")),
            energy_source=data.get("energy_source"),
            samples=int(data.get("samples") or 0),
        )


class Tally:
    """Running per-device summary, so a long run never keeps its rows in memory."""

    def __init__(self) -> None:
        self.samples = 0
        self.peak_memory_gib: float | None = None
        self.util_sum = 0.0
        self.util_n = 0
        self.energy_j: float | None = None

    def add(self, r: Reading) -> None:
        self.samples += 1
        if r.memory_used_gib is not None:
            self.peak_memory_gib = max(self.peak_memory_gib or 0.0, r.memory_used_gib)
        if r.util_pct is not None:
            self.util_sum += r.util_pct
            self.util_n += 1
        if r.energy_j is not None:
            self.energy_j = r.energy_j


def summarise(key: tuple[str, str], tally: Tally, source: Source | None) -> DeviceSummary:
    host, device = key
    return DeviceSummary(
        device=device,
        host=host,
        name=source.name if source else None,
        uuid=source.uuid if source else None,
        peak_memory_gib=_round(tally.peak_memory_gib, 3),
        mean_util_pct=_round(tally.util_sum / tally.util_n, 2) if tally.util_n else None,
        energy_j=_round(tally.energy_j, 3),
        energy_source=source.energy_source if source and tally.energy_j is not None else None,
        samples=tally.samples,
    )


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)
