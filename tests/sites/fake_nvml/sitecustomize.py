"""Test device only: every Python process of a local SLURM job sees four scripted H100s.

The local SLURM's GPUs are /dev/null links, so NVML is missing there. A test profile puts this
folder on PYTHONPATH, and every process started in the job (the runner, the monitors on the
other nodes) then imports `pynvml` as evalpipe's FakeNvml: four GPUs per node, with UUIDs that
differ between nodes, memory in use, utilisation, power and an energy counter that advances
100 J per reading.
"""

from __future__ import annotations

import os
import sys
import zlib

import pynvml  # noqa: F401 (the real module first: the fake takes its error classes from it)

from evalpipe.monitor.fake_nvml import GIB, FakeGpu, FakeNvml, fake_uuid

_node = zlib.crc32(os.environ.get("SLURMD_NODENAME", "local").encode()) % 10_000
sys.modules["pynvml"] = FakeNvml(  # type: ignore[assignment]
    [
        FakeGpu(
            uuid=fake_uuid(_node * 10 + i),
            memory_used_bytes=(10 * GIB, 30 * GIB, 20 * GIB),
            util_pct=(40, 80),
            power_mw=(300_000,),
            energy_mj=tuple(range(0, 10**9, 100_000)),
        )
        for i in range(4)
    ]
)
