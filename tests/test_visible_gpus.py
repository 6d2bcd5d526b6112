"""CUDA_VISIBLE_DEVICES → NVML devices, following CUDA's rules, on a scripted node."""

from __future__ import annotations

import logging

import pytest

from evalpipe.monitor.fake_nvml import FakeGpu, FakeNvml, fake_uuid
from evalpipe.monitor.visible_gpus import visible_devices

MIG_UUID = "MIG-5c89e4d8-4a5e-5b3c-9f0d-0123456789ab"


@pytest.fixture
def node() -> FakeNvml:
    fake = FakeNvml(
        [FakeGpu(uuid=fake_uuid(i)) for i in range(4)],
        mig=[FakeGpu(uuid=MIG_UUID, name="NVIDIA H100 80GB HBM3 MIG 1g.10gb")],
    )
    fake.nvmlInit()
    return fake


def uuids(gpus) -> list[tuple[int, str]]:
    return [(g.ordinal, g.uuid) for g in gpus]


def test_unset_means_every_gpu_in_nvml_order(node: FakeNvml) -> None:
    assert uuids(visible_devices(node, None)) == [(i, fake_uuid(i)) for i in range(4)]


def test_indices_are_renumbered_in_list_order(node: FakeNvml) -> None:
    assert uuids(visible_devices(node, "2,0")) == [(0, fake_uuid(2)), (1, fake_uuid(0))]


def test_full_uuid_and_unique_prefix(node: FakeNvml) -> None:
    got = visible_devices(node, f"{fake_uuid(3)}, GPU-00000001")
    assert uuids(got) == [(0, fake_uuid(3)), (1, fake_uuid(1))]


def test_set_but_empty_means_no_gpu(node: FakeNvml) -> None:
    assert visible_devices(node, "") == []


@pytest.mark.parametrize(
    ("visible", "kept", "why"),
    [
        ("0,9,1", 1, "not a GPU index on this node (NVML sees 4 GPUs)"),
        ("1,-1,2", 1, "neither a GPU index"),
        ("NoDevFiles", 0, "neither a GPU index"),
        ("GPU-0000000,2", 0, "matching 4 GPUs"),  # a prefix of every UUID: ambiguous
        ("GPU-ffffffff-0000-4000-8000-000000000000", 0, "not a GPU on this node (Not Found)"),
    ],
)
def test_an_unresolvable_entry_hides_it_and_all_after_it(
    node: FakeNvml, caplog: pytest.LogCaptureFixture, visible: str, kept: int, why: str
) -> None:
    with caplog.at_level(logging.WARNING):
        got = visible_devices(node, visible)
    assert len(got) == kept
    assert why in caplog.text
    assert "are not monitored" in caplog.text


def test_mig_uuid_is_resolved_and_marked(node: FakeNvml) -> None:
    (gpu,) = visible_devices(node, MIG_UUID)
    assert (gpu.ordinal, gpu.uuid, gpu.mig) == (0, MIG_UUID, True)


@pytest.mark.parametrize(
    ("visible", "why"),
    [
        (f"MIG-{fake_uuid(0)}/1/0", "legacy MIG-GPU-<uuid>/<gi>/<ci> form"),
        ("MIG-5c89e4d8", "full MIG UUID as `nvidia-smi -L` prints it, not a prefix"),
    ],
)
def test_mig_forms_it_cannot_map_are_refused_clearly(
    node: FakeNvml, caplog: pytest.LogCaptureFixture, visible: str, why: str
) -> None:
    with caplog.at_level(logging.WARNING):
        assert visible_devices(node, visible) == []
    assert why in caplog.text


def test_a_gpu_named_twice_is_monitored_once(
    node: FakeNvml, caplog: pytest.LogCaptureFixture
) -> None:
    assert uuids(visible_devices(node, f"1,{fake_uuid(1)}")) == [(0, fake_uuid(1))]
    assert "twice" in caplog.text


def test_indices_on_a_mixed_node_warn_unless_pci_bus_order(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeNvml([FakeGpu(uuid=fake_uuid(0), name="NVIDIA A100"), FakeGpu(uuid=fake_uuid(1))])
    fake.nvmlInit()
    with caplog.at_level(logging.WARNING):
        visible_devices(fake, "1", device_order="PCI_BUS_ID")
        visible_devices(fake, fake_uuid(1))
    assert caplog.text == ""
    with caplog.at_level(logging.WARNING):
        visible_devices(fake, "1")
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID" in caplog.text
