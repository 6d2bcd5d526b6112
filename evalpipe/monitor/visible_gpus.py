"""Map CUDA_VISIBLE_DEVICES to the NVML devices this job owns, following CUDA's own rules.

CUDA reads the variable as a comma-separated list of indices, GPU UUIDs (`GPU-…`, or any prefix
of one that names a single GPU) and MIG UUIDs (`MIG-…`); devices are numbered in list order, and
an entry naming no device hides it and every entry after it. We mirror that so that `gpuN` in
metrics.csv is the device the engine calls `cuda:N`. Only an unset variable means "every GPU on
the node": a set but empty variable means none.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

_INDEX = re.compile(r"^\d+$")
_FULL_GPU_UUID = re.compile(r"^GPU-[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$")


@dataclass(frozen=True, kw_only=True)
class VisibleGpu:
    """One device the job owns, as CUDA numbers it inside the job."""

    ordinal: int  # position in CUDA_VISIBLE_DEVICES: the N of cuda:N and of "gpuN"
    handle: Any  # NVML device handle (or MIG device handle)
    uuid: str
    name: str
    mig: bool  # a MIG slice: power and energy belong to the whole GPU, shared with other slices


def visible_devices(
    nvml: Any, visible: str | None, *, device_order: str | None = None
) -> list[VisibleGpu]:
    """The NVML devices named by `visible` (a CUDA_VISIBLE_DEVICES value), in CUDA order.

    Entries NVML cannot resolve are logged and, like CUDA, end the list. `device_order` is
    CUDA_DEVICE_ORDER: indices agree with NVML's (PCI bus order) only under PCI_BUS_ID or on a
    node whose GPUs are all the same model, so other cases get a warning.
    """
    count = nvml.nvmlDeviceGetCount()
    if visible is None:
        entries = [str(i) for i in range(count)]
    else:
        entries = [e.strip() for e in visible.split(",")] if visible.strip() else []
    gpus: list[VisibleGpu] = []
    seen: set[str] = set()
    by_index = False
    for ordinal, entry in enumerate(entries):
        try:
            handle, is_index = _handle(nvml, entry, count)
        except _Unresolved as why:
            log.warning(
                "CUDA_VISIBLE_DEVICES entry %r %s; like CUDA, it and the entries after it "
                "(%s) are not monitored.",
                entry,
                why,
                ",".join(entries[ordinal:]),
            )
            break
        by_index = by_index or is_index
        uuid = nvml.nvmlDeviceGetUUID(handle)
        if uuid in seen:
            log.warning("CUDA_VISIBLE_DEVICES names %s twice; it is monitored once.", uuid)
            continue
        seen.add(uuid)
        name = nvml.nvmlDeviceGetName(handle)
        gpus.append(
            VisibleGpu(
                ordinal=ordinal, handle=handle, uuid=uuid, name=name, mig=uuid.startswith("MIG-")
            )
        )
    if by_index and device_order != "PCI_BUS_ID":
        _warn_if_order_ambiguous(nvml, count)
    return gpus


class _Unresolved(Exception):
    """An entry that names no device NVML can give us; the message says why."""


def _handle(nvml: Any, entry: str, count: int) -> tuple[Any, bool]:
    """(NVML handle, whether the entry was an index) for one CUDA_VISIBLE_DEVICES entry."""
    if _INDEX.match(entry):
        if int(entry) >= count:
            raise _Unresolved(f"is not a GPU index on this node (NVML sees {count} GPUs)")
        return nvml.nvmlDeviceGetHandleByIndex(int(entry)), True
    if entry.startswith("MIG-GPU-") or "/" in entry:
        # The pre-R470 form MIG-GPU-<uuid>/<gi>/<ci>; no driver that supports Hopper uses it.
        raise _Unresolved(
            "uses the legacy MIG-GPU-<uuid>/<gi>/<ci> form, which evalpipe does not map; "
            "give the MIG UUID that `nvidia-smi -L` prints (MIG-<uuid>)"
        )
    if entry.startswith("MIG-"):
        try:
            return nvml.nvmlDeviceGetHandleByUUID(entry), False
        except nvml.NVMLError as err:
            raise _Unresolved(
                f"is not a MIG device NVML knows ({err}); evalpipe needs the full MIG UUID "
                "as `nvidia-smi -L` prints it, not a prefix"
            ) from err
    if entry.startswith("GPU-"):
        if _FULL_GPU_UUID.match(entry):
            try:
                return nvml.nvmlDeviceGetHandleByUUID(entry), False
            except nvml.NVMLError as err:
                raise _Unresolved(f"is not a GPU on this node ({err})") from err
        return _by_uuid_prefix(nvml, entry, count), False
    raise _Unresolved("is neither a GPU index, a GPU-… UUID nor a MIG-… UUID")


def _by_uuid_prefix(nvml: Any, prefix: str, count: int) -> Any:
    """CUDA accepts any UUID prefix that names exactly one GPU; NVML only full UUIDs."""
    matches = []
    for index in range(count):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        if nvml.nvmlDeviceGetUUID(handle).lower().startswith(prefix.lower()):
            matches.append(handle)
    if len(matches) != 1:
        raise _Unresolved(
            f"is a UUID prefix matching {len(matches)} GPUs on this node (CUDA needs exactly one)"
        )
    return matches[0]


def _warn_if_order_ambiguous(nvml: Any, count: int) -> None:
    names = {nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)}
    if len(names) > 1:
        log.warning(
            "GPUs are chosen by index on a node with mixed models (%s) and CUDA_DEVICE_ORDER is "
            "not PCI_BUS_ID: CUDA may number them differently from NVML, so metrics could be "
            "recorded for the wrong GPU. Set CUDA_DEVICE_ORDER=PCI_BUS_ID or use GPU UUIDs.",
            ", ".join(sorted(names)),
        )
