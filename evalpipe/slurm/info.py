"""What `scontrol show partition` / `scontrol show node` print → typed records (pure: text in).

Both the one-line form (`--oneliner`) and the default multi-line form parse: a record starts at
a line whose first word is `PartitionName=` or `NodeName=`. Values may hold spaces (`OS=Linux
6.1 #1 SMP`), so a value runs until the next ` Key=`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# A key starts a field only after whitespace; `cpu=4,mem=8G` inside a value follows a comma.
_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_/:.]*)=")
UNLIMITED = ("UNLIMITED", "INFINITE", "infinite", "NONE", "N/A", "(null)", "")


def records(text: str, first_key: str) -> list[dict[str, str]]:
    """Each record's fields, in order; `first_key` (PartitionName, NodeName) opens a record."""
    groups: list[list[str]] = []
    for line in text.splitlines():
        if line.lstrip().startswith(f"{first_key}="):
            groups.append([])
        if groups and line.strip():
            groups[-1].append(line.strip())
    out = []
    for group in groups:
        joined = " ".join(group)
        keys = list(_KEY.finditer(joined))
        fields = {}
        for i, match in enumerate(keys):
            end = keys[i + 1].start() if i + 1 < len(keys) else len(joined)
            fields[match.group(1)] = joined[match.end() : end].strip()
        out.append(fields)
    return out


def gpu_gres(text: str) -> dict[str | None, int]:
    """GPU counts by type from a GRES string; None is the untyped `gpu:N`.

    "gpu:a100:4(S:0-1),nvme:1" → {"a100": 4}; "gpu:2,gpu:v100:2(S:1)" → {None: 2, "v100": 2}.
    """
    counts: dict[str | None, int] = {}
    # Commas inside "(S:0,1)" do not separate entries.
    for entry in re.split(r",(?![^(]*\))", text.strip()):
        parts = re.sub(r"\(.*?\)", "", entry).strip().split(":")
        if parts[0] != "gpu" or len(parts) < 2:
            continue
        kind = parts[1] if len(parts) == 3 else None
        number = re.fullmatch(r"(\d+)([KMG]?)", parts[-1])
        if number is None:
            continue
        scale = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}[number.group(2)]
        counts[kind] = counts.get(kind, 0) + int(number.group(1)) * scale
    return counts


def _number(value: str | None) -> int | None:
    """An integer field, or None for UNLIMITED and friends."""
    if value is None or value in UNLIMITED:
        return None
    match = re.match(r"\d+", value)
    return int(match.group()) if match else None


@dataclass(frozen=True, kw_only=True)
class Node:
    name: str
    cpus: int  # CPUs jobs may use (CPUEfctv: less any specialized cores)
    memory_mb: int  # RealMemory less MemSpecLimit
    gpus: dict[str | None, int]  # GRES gpu counts by type
    features: tuple[str, ...]
    partitions: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Partition:
    name: str
    default: bool
    max_time: str | None  # None: no limit
    max_nodes: int | None
    max_cpus_per_node: int | None
    max_mem_per_node_mb: int | None
    qos: str | None


def nodes(text: str) -> list[Node]:
    out = []
    for f in records(text, "NodeName"):
        features = f.get("AvailableFeatures") or f.get("Features") or ""
        partitions = f.get("Partitions", "")
        out.append(
            Node(
                name=f["NodeName"],
                cpus=_number(f.get("CPUEfctv")) or _number(f.get("CPUTot")) or 0,
                memory_mb=(_number(f.get("RealMemory")) or 0)
                - (_number(f.get("MemSpecLimit")) or 0),
                gpus=gpu_gres(f.get("Gres", "")),
                features=tuple(x for x in features.split(",") if x and x not in UNLIMITED),
                partitions=tuple(x for x in partitions.split(",") if x),
            )
        )
    return out


def partitions(text: str) -> list[Partition]:
    out = []
    for f in records(text, "PartitionName"):
        max_time = f.get("MaxTime", "UNLIMITED")
        out.append(
            Partition(
                name=f["PartitionName"],
                default=f.get("Default") == "YES",
                max_time=None if max_time in UNLIMITED else max_time,
                max_nodes=_number(f.get("MaxNodes")),
                max_cpus_per_node=_number(f.get("MaxCPUsPerNode")),
                max_mem_per_node_mb=_number(f.get("MaxMemPerNode")),
                qos=None if f.get("QoS", "N/A") in UNLIMITED else f["QoS"],
            )
        )
    return out
