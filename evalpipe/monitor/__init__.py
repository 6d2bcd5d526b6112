"""Per-GPU metrics of a job through NVML (CPU fallback), one module per job: device readers
(nvml, cpu), the CSV log (csvlog), the cross-node phase protocol (phase), the per-device
summaries (devicesummary) and the sampler thread that drives them (sampler).

The names below load their module on first use: the run directory's records import
`monitor.devicesummary` on every CLI start, which must not pull in the sampler, NVML and psutil.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOME = {
    "COLUMNS": "csvlog",
    "device_summaries": "csvlog",
    "Monitor": "sampler",
    "DeviceSummary": "devicesummary",
}
__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
