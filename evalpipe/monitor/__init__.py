"""Per-GPU metrics of a job through NVML (CPU fallback), one module per job: device readers
(nvml, cpu), the CSV log (csvlog), the cross-node phase protocol (phase), the per-device
summaries (summary) and the sampler thread that drives them (sampler)."""

from evalpipe.monitor.csvlog import COLUMNS, device_summaries
from evalpipe.monitor.sampler import Monitor
from evalpipe.monitor.summary import DeviceSummary

__all__ = ["COLUMNS", "DeviceSummary", "Monitor", "device_summaries"]
