"""The GPU catalogue: configs/gpus.yaml (and every search folder's) → frozen Gpu records."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from evalpipe.catalog.configpath import config_dir, config_dirs
from evalpipe.core.configio import build, read_yaml, unknown_name

DeviceKind = Literal["gpu", "cpu"]
DEVICE_KINDS: tuple[str, ...] = get_args(DeviceKind)


@dataclass(frozen=True, kw_only=True)
class Gpu:
    """One GPU model as the driver reports it (or, kind cpu, a host running the CPU engine)."""

    name: str
    memory_gib: float  # total memory as nvidia-smi / NVML reports it, GiB
    bandwidth_gbs: float  # peak memory bandwidth, GB/s
    fp8: bool  # native FP8 tensor cores (Hopper, Ada, Blackwell)
    # The name NVML / nvidia-smi / torch report ("NVIDIA A100-SXM4-80GB"): vLLM picks some
    # defaults from it, and the monitor can match a live device to this entry.
    device_name: str = ""
    description: str = ""
    # Dense tensor-core peaks and the board power limit: the estimate's roofline and energy
    # (evalpipe/estimate/throughput.py). None: unknown, so only a calibrated estimate is possible.
    bf16_tflops: float | None = None
    fp8_tflops: float | None = None
    power_w: float | None = None
    # cpu: a host for the CPU engine, there to be calibrated; never offered as a larger GPU.
    kind: DeviceKind = "gpu"

    def __post_init__(self) -> None:
        if self.memory_gib <= 0 or self.bandwidth_gbs <= 0:
            raise ValueError(
                f"memory_gib and bandwidth_gbs must be positive, got {self.memory_gib!r} "
                f"and {self.bandwidth_gbs!r}"
            )
        for key in ("bf16_tflops", "fp8_tflops", "power_w"):
            value = getattr(self, key)
            if value is not None and (isinstance(value, bool) or not value > 0):
                raise ValueError(f"{key} must be a positive number or left out, got {value!r}")
        if self.fp8_tflops is not None and not self.fp8:
            raise ValueError("fp8_tflops needs fp8: true (FP8 tensor cores)")
        if self.kind not in DEVICE_KINDS:
            raise ValueError(f"kind {self.kind!r} is not one of {', '.join(DEVICE_KINDS)}")

    @property
    def is_gpu(self) -> bool:
        return self.kind == "gpu"


def load_gpus() -> dict[str, Gpu]:
    """The GPU catalogue keyed by name: the shipped gpus.yaml plus every search folder's.

    A user folder's entry is added, or replaces the shipped entry of the same name whole (the
    first folder in $EVALPIPE_CONFIG_PATH wins).
    """
    gpus: dict[str, Gpu] = {}
    for root in reversed(config_dirs()):
        path = root / "gpus.yaml"
        if root != config_dir() and not path.is_file():
            continue
        for name, spec in read_yaml(path).items():
            gpus[name] = build(Gpu, {"name": name, **(spec or {})}, f"{path}:{name}")
    return gpus


def get_gpu(name: str) -> Gpu:
    gpus = load_gpus()
    if name not in gpus:
        raise unknown_name("GPU", name, gpus)
    return gpus[name]
