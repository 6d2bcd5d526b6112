"""A scripted stand-in for the `pynvml` module, passed to Monitor(nvml=...) in tests.

It implements the pynvml functions evalpipe calls, with pynvml's own error classes and
constants, so the code under test handles exactly what NVML raises. Each metric of each GPU
answers the next value of its script (the last value repeats), so a test knows every reading.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from evalpipe.core.errors import ConfigError

GIB = 2**30
# "memory_v2" is the versioned memory query (drivers from R510); "memory" is both queries' reading.
METRICS = ("memory", "memory_v2", "utilization", "temperature", "power", "sm_clock", "energy")


@dataclass(frozen=True, kw_only=True)
class FakeGpu:
    """One scripted device. `errors` maps a metric (see METRICS) to the NVML error code it raises
    on every read, e.g. {"energy": pynvml.NVML_ERROR_NOT_SUPPORTED}."""

    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    memory_total_bytes: int = 80 * GIB
    memory_used_bytes: Sequence[int] = (0,)  # allocated, as the v2 query reports it
    memory_reserved_bytes: int = 0  # the driver's own; the v1 query counts it as used
    util_pct: Sequence[int] = (0,)
    mem_util_pct: Sequence[int] = (0,)
    temperature_c: Sequence[int] = (30,)
    power_mw: Sequence[int] = (70_000,)
    sm_clock_mhz: Sequence[int] = (1980,)
    energy_mj: Sequence[int] = (0,)
    errors: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.errors) - set(METRICS))
        if unknown:
            raise ConfigError(
                f"FakeGpu {self.uuid}: unknown metric(s) {unknown} in errors; "
                f"valid: {', '.join(METRICS)}."
            )


@dataclass(frozen=True)
class _Memory:  # pynvml's c_nvmlMemory_t fields (and c_nvmlMemory_v2_t's reserved)
    total: int
    free: int
    used: int
    reserved: int | None = None


@dataclass(frozen=True)
class _Utilization:  # pynvml's c_nvmlUtilization_t fields
    gpu: int
    memory: int


class FakeNvml:
    """Module-like object: `gpus` are enumerable by index (NVML order); `mig` devices are
    reachable by UUID only, as MIG slices are. `init_error` makes nvmlInit raise that code."""

    def __init__(
        self,
        gpus: Sequence[FakeGpu],
        *,
        mig: Sequence[FakeGpu] = (),
        init_error: int | None = None,
    ) -> None:
        import pynvml  # only its error classes and constants: no driver is touched

        self.NVMLError = pynvml.NVMLError
        self.NVMLError_NotSupported = pynvml.NVMLError_NotSupported
        self.NVMLError_FunctionNotFound = pynvml.NVMLError_FunctionNotFound
        self.NVMLError_ArgumentVersionMismatch = pynvml.NVMLError_ArgumentVersionMismatch
        self.NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU
        self.NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM
        self.nvmlMemory_v2 = pynvml.nvmlMemory_v2
        self._codes = pynvml
        self.gpus = list(gpus)
        self.mig = list(mig)
        self.init_error = init_error
        self.initialized = 0  # nvmlInit calls minus nvmlShutdown calls, as NVML counts them
        self.reads: Counter[tuple[str, str]] = Counter()  # (uuid, metric) -> times read

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise self.NVMLError(self.init_error)
        self.initialized += 1

    def nvmlShutdown(self) -> None:
        self._check_init()
        self.initialized -= 1

    def nvmlDeviceGetCount(self) -> int:
        self._check_init()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        self._check_init()
        if not 0 <= index < len(self.gpus):
            raise self.NVMLError(self._codes.NVML_ERROR_INVALID_ARGUMENT)
        return self.gpus[index]

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> FakeGpu:
        self._check_init()
        for gpu in (*self.gpus, *self.mig):
            if gpu.uuid == uuid:
                return gpu
        raise self.NVMLError(self._codes.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetUUID(self, handle: FakeGpu) -> str:
        self._check_init()
        return handle.uuid

    def nvmlDeviceGetName(self, handle: FakeGpu) -> str:
        self._check_init()
        return handle.name

    def nvmlDeviceGetMemoryInfo(self, handle: FakeGpu, version: int | None = None) -> _Memory:
        total, reserved = handle.memory_total_bytes, handle.memory_reserved_bytes
        if version is None:  # v1: used = total - free, the driver's reservation included
            used = self._read(handle, "memory", handle.memory_used_bytes) + reserved
            return _Memory(total=total, free=total - used, used=used)
        self._check_arg(version == self.nvmlMemory_v2)
        self._check_init()
        if "memory_v2" in handle.errors:
            raise self.NVMLError(handle.errors["memory_v2"])
        used = self._read(handle, "memory", handle.memory_used_bytes)
        return _Memory(total=total, free=total - used - reserved, used=used, reserved=reserved)

    def nvmlDeviceGetUtilizationRates(self, handle: FakeGpu) -> _Utilization:
        n = self.reads[(handle.uuid, "utilization")]
        gpu = self._read(handle, "utilization", handle.util_pct)
        return _Utilization(gpu=gpu, memory=_pick(handle.mem_util_pct, n))

    def nvmlDeviceGetTemperature(self, handle: FakeGpu, sensor: int) -> int:
        self._check_arg(sensor == self.NVML_TEMPERATURE_GPU)
        return self._read(handle, "temperature", handle.temperature_c)

    def nvmlDeviceGetPowerUsage(self, handle: FakeGpu) -> int:
        return self._read(handle, "power", handle.power_mw)

    def nvmlDeviceGetClockInfo(self, handle: FakeGpu, type: int) -> int:  # pynvml's name
        self._check_arg(type == self.NVML_CLOCK_SM)
        return self._read(handle, "sm_clock", handle.sm_clock_mhz)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: FakeGpu) -> int:
        return self._read(handle, "energy", handle.energy_mj)

    def _read(self, handle: FakeGpu, metric: str, script: Sequence[int]) -> int:
        self._check_init()
        if metric in handle.errors:
            raise self.NVMLError(handle.errors[metric])
        n = self.reads[(handle.uuid, metric)]
        self.reads[(handle.uuid, metric)] += 1
        return _pick(script, n)

    def _check_init(self) -> None:
        if self.initialized <= 0:
            raise self.NVMLError(self._codes.NVML_ERROR_UNINITIALIZED)

    def _check_arg(self, ok: bool) -> None:
        if not ok:
            raise self.NVMLError(self._codes.NVML_ERROR_INVALID_ARGUMENT)


def _pick(script: Sequence[int], n: int) -> int:
    return script[min(n, len(script) - 1)]


def fake_uuid(n: int) -> str:
    """A well-formed, distinct GPU UUID for fake device n."""
    return f"GPU-{n:08x}-0000-4000-8000-{n:012x}"
