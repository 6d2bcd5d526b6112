"""The fake NVML stays true to the installed pynvml: same names, signatures, errors, constants."""

from __future__ import annotations

import inspect

import pynvml
import pytest

from evalpipe.core.errors import ConfigError
from evalpipe.monitor.fake_nvml import FakeGpu, FakeNvml, fake_uuid


def test_every_name_the_fake_offers_is_pynvml_s_with_the_same_parameters() -> None:
    fake = FakeNvml([])
    names = [n for n in dir(fake) if n.lower().startswith("nvml")]
    assert len(names) >= 15
    for name in names:
        real, ours = getattr(pynvml, name), getattr(fake, name)
        if inspect.isfunction(real):
            real_params = [(p.name, p.default) for p in inspect.signature(real).parameters.values()]
            our_params = [(p.name, p.default) for p in inspect.signature(ours).parameters.values()]
            assert our_params == real_params, name
        else:
            assert ours is real or ours == real, name  # error classes and constants


def test_calls_before_init_or_for_unknown_devices_fail_as_nvml_does() -> None:
    fake = FakeNvml([FakeGpu(uuid=fake_uuid(0))])
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()
    fake.nvmlInit()
    with pytest.raises(pynvml.NVMLError_NotFound):
        fake.nvmlDeviceGetHandleByUUID(fake_uuid(1))
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlDeviceGetHandleByIndex(1)
    fake.nvmlShutdown()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fake.nvmlDeviceGetHandleByIndex(0)


def test_scripts_advance_per_read_and_hold_their_last_value() -> None:
    fake = FakeNvml([FakeGpu(uuid=fake_uuid(0), power_mw=(1, 2))])
    fake.nvmlInit()
    gpu = fake.nvmlDeviceGetHandleByIndex(0)
    assert [fake.nvmlDeviceGetPowerUsage(gpu) for _ in range(4)] == [1, 2, 2, 2]


def test_a_misspelt_metric_in_errors_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"unknown metric\(s\) \['energgy'\]"):
        FakeGpu(uuid=fake_uuid(0), errors={"energgy": pynvml.NVML_ERROR_NOT_SUPPORTED})
