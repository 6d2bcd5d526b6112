"""One GPU (or MIG slice) read through NVML: memory, utilisation, power, clocks, energy."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from evalpipe.monitor.readings import GIB, LogOnce, Reading
from evalpipe.monitor.visible_gpus import VisibleGpu


class GpuSource:
    """One GPU (or MIG slice) read through NVML."""

    def __init__(self, nvml: Any, gpu: VisibleGpu, once: LogOnce) -> None:
        self.device = f"gpu{gpu.ordinal}"
        self.name = gpu.name
        self.uuid: str | None = gpu.uuid
        # "counter": NVML's energy counter; "integrated": power summed over samples, for devices
        # without the counter; None: neither (MIG slices: the GPU's power is shared).
        self.energy_source: str | None = None if gpu.mig else "counter"
        self.energy_offset_j = 0.0  # energy recorded by earlier attempts of this run
        self._nvml = nvml
        self._handle = gpu.handle
        self._once = once
        self._memory_v2 = True
        self._counter_base_mj: int | None = None
        self._integrated_j = 0.0
        self._last_power: tuple[float, float] | None = None  # (monotonic time, W)
        if gpu.mig:
            once(
                logging.INFO,
                (self.device, "mig"),
                "%s is a MIG slice (%s): power and energy are the whole GPU's, shared with other "
                "slices, so they are not recorded for it.",
                self.device,
                gpu.uuid,
            )

    def read(self, now: float) -> Reading:
        nvml, h = self._nvml, self._handle
        mem = self._memory()
        util = self._call("utilization", nvml.nvmlDeviceGetUtilizationRates, h)
        temp = self._call(
            "temperature", nvml.nvmlDeviceGetTemperature, h, nvml.NVML_TEMPERATURE_GPU
        )
        clock = self._call("sm_clock", nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_SM)
        power_mw = None
        if self.energy_source is not None:
            power_mw = self._call("power", nvml.nvmlDeviceGetPowerUsage, h)
        power_w = None if power_mw is None else power_mw / 1000
        return Reading(
            memory_used_gib=None if mem is None else mem.used / GIB,
            memory_total_gib=None if mem is None else mem.total / GIB,
            util_pct=None if util is None else util.gpu,
            mem_util_pct=None if util is None else util.memory,
            temperature_c=temp,
            power_w=power_w,
            sm_clock_mhz=clock,
            energy_j=self._energy(now, power_w),
        )

    def _memory(self) -> Any:
        nvml = self._nvml
        if self._memory_v2:
            try:
                # v2's "used" leaves out the driver's reservation, as nvidia-smi shows it.
                return nvml.nvmlDeviceGetMemoryInfo(self._handle, version=nvml.nvmlMemory_v2)
            except (
                nvml.NVMLError_FunctionNotFound,
                nvml.NVMLError_ArgumentVersionMismatch,
                nvml.NVMLError_NotSupported,
            ):
                self._memory_v2 = False  # a driver before R510: v1 for the rest of the run
                self._once(
                    logging.INFO,
                    (self.device, "memory-v1"),
                    "%s (%s): the driver has no versioned memory query; memory_used_gib "
                    "includes the driver's reservation.",
                    self.device,
                    self.name,
                )
            except nvml.NVMLError as err:
                self._log_error("memory", err)
                return None
        return self._call("memory", nvml.nvmlDeviceGetMemoryInfo, self._handle)

    def _energy(self, now: float, power_w: float | None) -> float | None:
        if self.energy_source == "counter":
            try:
                mj = self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)
            except self._nvml.NVMLError_NotSupported:
                self.energy_source = "integrated"
                self._once(
                    logging.WARNING,
                    (self.device, "energy-integrated"),
                    "%s (%s) has no NVML energy counter: energy_j integrates power_w over the "
                    "samples instead (trapezoids; misses spikes shorter than the interval).",
                    self.device,
                    self.name,
                )
            except self._nvml.NVMLError as err:
                self._log_error("energy", err)
                return None
            else:
                if self._counter_base_mj is None:
                    self._counter_base_mj = mj
                return self.energy_offset_j + (mj - self._counter_base_mj) / 1000
        if self.energy_source == "integrated":
            if power_w is None:
                self._last_power = None  # a gap in power readings is not guessed across
                return None
            if self._last_power is not None:
                t0, p0 = self._last_power
                self._integrated_j += (p0 + power_w) / 2 * (now - t0)
            self._last_power = (now, power_w)
            return self.energy_offset_j + self._integrated_j
        return None

    def _call(self, metric: str, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except self._nvml.NVMLError as err:
            self._log_error(metric, err)
            return None

    def _log_error(self, metric: str, err: Exception) -> None:
        if isinstance(err, self._nvml.NVMLError_NotSupported):
            self._once(
                logging.INFO,
                (self.device, metric, "unsupported"),
                "%s (%s) does not report %s through NVML; those columns stay empty.",
                self.device,
                self.name,
                metric,
            )
        else:
            self._once(
                logging.WARNING,
                (self.device, metric, type(err).__name__),
                "%s (%s): reading %s failed (%s); left empty while it fails.",
                self.device,
                self.name,
                metric,
                err,
            )
