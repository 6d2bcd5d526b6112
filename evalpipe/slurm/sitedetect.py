"""A cluster profile from the scheduler's own description (pure: scontrol text in, YAML out).

What SLURM states (partition, GRES type and count, CPUs, memory, MaxTime, MaxNodes) becomes a
value; what it cannot know (account, setup lines, caches, the python on compute nodes, free Ray
ports, a time limit under an unlimited MaxTime, a GPU the catalogue matches more than one way)
gets a working default marked CHECK in the file and listed by `checks()`. Nothing it cannot
decide is picked silently: several GPU partitions or GPU types, or a GPU the catalogue does not
know, stop with the choices and the option that picks one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evalpipe.catalog.clusters import Cluster, RaySettings
from evalpipe.catalog.containers import IMAGE_SUFFIX
from evalpipe.catalog.gpus import Gpu
from evalpipe.catalog.slurmtime import slurm_minutes
from evalpipe.core.configio import build, unknown_name
from evalpipe.core.errors import ConfigError, SlurmError
from evalpipe.slurm import info as slurminfo

DEFAULT_TIME = "04:00:00"
_PLAIN = re.compile(r"[A-Za-z][A-Za-z0-9_.+/-]*")
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "y", "n", "~"}
COMMENT_COLUMN = 31


@dataclass(frozen=True, kw_only=True)
class Entry:
    """One line of the profile (a mapping for `ray`)."""

    key: str
    value: Any
    note: str = ""
    check: bool = False  # uncertain: marked CHECK in the file and listed on stderr
    suggestion: bool = False  # written commented out: a value to fill in, not set


@dataclass(frozen=True, kw_only=True)
class Detected:
    partition: str
    entries: tuple[Entry, ...]
    overview: tuple[str, ...]  # one line per partition seen

    def data(self) -> dict[str, Any]:
        """The profile's values, as the YAML file holds them."""
        return {e.key: e.value for e in self.entries if not e.suggestion}

    def checks(self) -> list[Entry]:
        return [e for e in self.entries if e.check]

    def yaml(self) -> str:
        lines = [
            f"# Cluster profile for SLURM partition {self.partition!r}, written by",
            "# `evalpipe site detect` from `scontrol show partition` and `scontrol show node`.",
            "# Lines marked CHECK hold values SLURM cannot tell: review them before submitting.",
            "# Keys and meanings: docs/slurm.md (Cluster profiles).",
            "#",
            "# Partitions seen (* = default): GPUs per node, nodes, MaxTime",
            *(f"#   {line}" for line in self.overview),
        ]
        for e in self.entries:
            lines.extend(_lines(e))
        return "\n".join(lines) + "\n"


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    text = str(value)
    if _PLAIN.fullmatch(text) and text.lower() not in _YAML_WORDS:
        return text
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a YAML double-quoted scalar


def _lines(e: Entry) -> list[str]:
    """A CHECK note goes on its own line above the key; a plain note after the value."""
    if isinstance(e.value, dict):
        head = f"{e.key}:"
        body = [f"  {k}: {_scalar(v)}" for k, v in e.value.items()]
    elif isinstance(e.value, list | tuple):
        head = f"{e.key}: []" if not e.value else f"{e.key}:"
        body = [f"  - {_scalar(v)}" for v in e.value]
    else:
        head, body = f"{e.key}: {_scalar(e.value)}", []
    if e.suggestion:
        head, body = f"# {head}", [f"# {line}" for line in body]
    if e.check:
        return [f"# CHECK {e.key}: {e.note}", head, *body]
    if e.note:
        head = f"{head.ljust(COMMENT_COLUMN - 1)} # {e.note}"
    return [head, *body]


def _gpu_nodes(
    nodes: Iterable[slurminfo.Node], partition: str
) -> dict[str | None, list[tuple[slurminfo.Node, int]]]:
    """The partition's GPU nodes grouped by GRES type, each with its GPU count of that type."""
    groups: dict[str | None, list[tuple[slurminfo.Node, int]]] = {}
    for node in nodes:
        if partition in node.partitions:
            for kind, count in node.gpus.items():
                groups.setdefault(kind, []).append((node, count))
    return groups


def _describe(groups: Mapping[str | None, list[tuple[slurminfo.Node, int]]]) -> str:
    if not groups:
        return "no GPUs in GRES"
    parts = []
    for kind, members in groups.items():
        counts = sorted({c for _, c in members})
        per_node = "/".join(str(c) for c in counts)
        parts.append(f"gpu:{kind or ''}{':' if kind else ''}{per_node} on {len(members)} nodes")
    return ", ".join(parts)


def _tokens(texts: Iterable[str]) -> set[str]:
    return {t for text in texts for t in re.split(r"[^a-z0-9]+", text.lower()) if t}


def _alnum(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def match_gpu(gres_type: str | None, features: Iterable[str], gpus: Mapping[str, Gpu]) -> list[str]:
    """Catalogue entries that fit a GRES type and node features, best first.

    An exact name or NVML device name ("nvidia_h100_80gb_hbm3", as GRES AutoDetect writes it)
    is one match. Otherwise the family ("a100") must appear as a word, and a memory word
    ("80gb") narrows it; what stays ambiguous comes back smallest memory first.
    """
    texts = [t for t in (gres_type, *features) if t]
    for text in texts:
        exact = [n for n, g in gpus.items() if _alnum(text) in (_alnum(n), _alnum(g.device_name))]
        if exact:
            return exact
    words = _tokens(texts)
    family = [n for n in gpus if n.split("-")[0] in words]
    sized = [n for n in family if len(n.split("-")) > 1 and n.split("-")[1] in words]
    chosen = sized or family
    return sorted(chosen, key=lambda n: gpus[n].memory_gib)


def detect(
    partitions_text: str,
    nodes_text: str,
    gpus: Mapping[str, Gpu],
    *,
    python: str,
    partition: str | None = None,
    gres_type: str | None = None,
    gpu: str | None = None,
    runtimes: Sequence[str] = (),
) -> Detected:
    """The profile for one GPU partition; `partition`, `gres_type` and `gpu` settle choices.
    `runtimes`: the container runtimes found here, each written as a commented container block."""
    parts = slurminfo.partitions(partitions_text)
    nodes = slurminfo.nodes(nodes_text)
    if not parts:
        raise SlurmError("scontrol show partition listed no partitions: is this a SLURM cluster?")
    grouped = {p.name: _gpu_nodes(nodes, p.name) for p in parts}
    overview = tuple(
        f"{p.name}{'*' if p.default else ''}: {_describe(grouped[p.name])}, "
        f"MaxTime {p.max_time or 'UNLIMITED'}"
        for p in parts
    )
    with_gpus = [p.name for p in parts if grouped[p.name]]
    listing = "; ".join(overview)
    if partition is None:
        if len(with_gpus) != 1:
            why = "none has GPUs in GRES" if not with_gpus else "several have GPUs"
            raise SlurmError(
                f"Cannot choose a partition: {why} ({listing}). Pass --partition NAME for a "
                "partition whose nodes declare GPUs as GRES (gpu:TYPE:N)."
            )
        partition = with_gpus[0]
    part = next((p for p in parts if p.name == partition), None)
    if part is None:
        raise unknown_name("partition", partition, [p.name for p in parts])
    groups = grouped[partition]
    if not groups:
        raise SlurmError(
            f"Partition {partition!r} has no nodes with GPUs in GRES, so jobs cannot request "
            f"GPUs there ({listing}). Choose another with --partition."
        )
    if gres_type is None:
        if len(groups) > 1:
            raise SlurmError(
                f"Partition {partition!r} mixes GPU types ({_describe(groups)}); a profile "
                "describes one. Pass --gres-type TYPE: jobs then ask for gpu:TYPE:N, which "
                "only those nodes have."
            )
        gres_type = next(iter(groups))
    elif gres_type not in groups:
        raise unknown_name(f"GPU type in partition {partition!r}", gres_type, map(str, groups))
    members = groups[gres_type]
    return Detected(
        partition=partition,
        entries=_entries(part, gres_type, members, gpus, python=python, gpu=gpu)
        + tuple(_container_entry(runtime) for runtime in runtimes),
        overview=overview,
    )


def _entries(
    part: slurminfo.Partition,
    gres_type: str | None,
    members: list[tuple[slurminfo.Node, int]],
    gpus: Mapping[str, Gpu],
    *,
    python: str,
    gpu: str | None,
) -> tuple[Entry, ...]:
    nodes = [n for n, _ in members]
    count = min(c for _, c in members)
    cpus = min(n.cpus for n in nodes)
    if part.max_cpus_per_node:
        cpus = min(cpus, part.max_cpus_per_node)
    memory_mb = min(n.memory_mb for n in nodes)
    if part.max_mem_per_node_mb:
        memory_mb = min(memory_mb, part.max_mem_per_node_mb)
    gpu_entry = _gpu_entry(gres_type, nodes, gpus, gpu)
    max_nodes = min(len(nodes), part.max_nodes or len(nodes))
    label = f"gpu:{gres_type}" if gres_type else "gpu"

    def uneven(values: list[int], unit: str) -> str:
        low, high = min(values), max(values)
        return "" if low == high else f"nodes have {low}–{high}{unit}; the smallest fits every node"

    spread_gpus = uneven([c for _, c in members], "")
    spread_cpus = uneven([n.cpus for n in nodes], " CPUs")
    spread_mem = uneven([n.memory_mb // 1024 for n in nodes], " GiB")
    entries = [
        Entry(
            key="description",
            value=f"partition {part.name}: {len(nodes)} nodes × {count} {gres_type or 'GPU'} "
            "(written by evalpipe site detect)",
        ),
        Entry(key="partition", value=part.name),
        gpu_entry,
    ]
    if gres_type:
        entries.append(Entry(key="gres_name", value=gres_type, note="the GRES type in gres.conf"))
    entries += [
        Entry(
            key="gpu_request",
            value="gres",
            note=f"--gres={label}:N; gpus-per-node also works under select/cons_tres",
        ),
        Entry(key="gpus_per_node", value=count, note=spread_gpus, check=bool(spread_gpus)),
        Entry(key="cpus_per_node", value=cpus, note=spread_cpus, check=bool(spread_cpus)),
        _memory_entry(memory_mb, spread_mem),
        Entry(
            key="max_nodes",
            value=max_nodes,
            note=f"{len(nodes)} nodes with {label}, MaxNodes {part.max_nodes or 'UNLIMITED'}",
        ),
        *_time_entries(part),
        Entry(
            key="python",
            value=python,
            note="the python that ran site detect: compute nodes must see the same path",
            check=True,
        ),
        Entry(
            key="setup",
            value=[],
            note="shell lines run first in each job (module load, venv activation): "
            "evalpipe cannot know them",
            check=True,
        ),
        Entry(
            key="account",
            value="CHANGE-ME",
            suggestion=True,
            check=True,
            note="sbatch --account, where the site charges jobs to an account",
        ),
    ]
    if part.qos:
        entries.append(Entry(key="qos", value=part.qos, note="the partition's QoS"))
    for key, what in (
        ("cache_dir", "EVALPIPE_CACHE: prepared model weights, on a shared file system"),
        ("hf_cache", "HF_HOME: Hugging Face downloads, shared by every job"),
        ("scratch_dir", "TMPDIR: node-local disk (Ray's session files)"),
    ):
        entries.append(
            Entry(key=key, value="/path/on/shared/storage", suggestion=True, check=True, note=what)
        )
    ray = RaySettings()
    entries.append(
        Entry(
            key="ray",
            value={
                "port": ray.port,
                "node_port_base": ray.node_port_base,
                "node_port_stride": ray.node_port_stride,
            },
            note="multi-node jobs: Ray's defaults; these ports must be free on the nodes",
            check=True,
        )
    )
    return tuple(entries)


def _container_entry(runtime: str) -> Entry:
    """A commented container block for a runtime this site has (docs/slurm.md, Containers)."""
    return Entry(
        key="container",
        value={
            "runtime": runtime,
            "image": f"/path/on/shared/storage/image{IMAGE_SUFFIX[runtime]}",
        },
        suggestion=True,
        note=f"{runtime} found here: jobs can run in an image (mounts, env, workdir: "
        "docs/slurm.md)",
    )


def _gpu_entry(
    gres_type: str | None,
    nodes: list[slurminfo.Node],
    gpus: Mapping[str, Gpu],
    chosen: str | None,
) -> Entry:
    if chosen is not None:
        if chosen not in gpus:
            raise unknown_name("GPU", chosen, gpus)
        return Entry(key="gpu", value=chosen, note="chosen with --gpu")
    common = set.intersection(*(set(n.features) for n in nodes))
    matches = match_gpu(gres_type, sorted(common), gpus)
    seen = f"GRES type {gres_type or '(none)'}, features {','.join(sorted(common)) or '(none)'}"
    if not matches:
        raise ConfigError(
            f"No GPU in the catalogue matches {seen}. Pass --gpu NAME with one of: "
            f"{', '.join(gpus)} (or add the GPU to a gpus.yaml in a folder on "
            "EVALPIPE_CONFIG_PATH)."
        )
    if len(matches) == 1:
        return Entry(key="gpu", value=matches[0], note=f"from {seen}")
    return Entry(
        key="gpu",
        value=matches[0],
        note=f"{seen} fits {', '.join(matches)}; the smallest is assumed (--gpu NAME picks)",
        check=True,
    )


def _memory_entry(memory_mb: int, spread: str) -> Entry:
    gib = memory_mb // 1024
    if gib < 1:
        # RealMemory defaults to 1 MB when the site never configured it.
        return Entry(
            key="memory_per_node_gib",
            value=1,
            note=f"SLURM reports RealMemory {memory_mb} MB (not configured?): set what a job "
            "may use",
            check=True,
        )
    return Entry(
        key="memory_per_node_gib",
        value=gib,
        note=spread or f"RealMemory {memory_mb} MB",
        check=bool(spread),
    )


def _time_entries(part: slurminfo.Partition) -> list[Entry]:
    if part.max_time is None:
        return [
            Entry(
                key="time_limit",
                value=DEFAULT_TIME,
                note="the partition has no MaxTime (UNLIMITED): set what your runs need",
                check=True,
            )
        ]
    try:
        limit = slurm_minutes(part.max_time)
    except ValueError:
        return [
            Entry(
                key="time_limit",
                value=DEFAULT_TIME,
                note=f"MaxTime {part.max_time!r} is not a SLURM time evalpipe reads",
                check=True,
            )
        ]
    time_limit = DEFAULT_TIME if slurm_minutes(DEFAULT_TIME) <= limit else part.max_time
    return [
        Entry(key="time_limit", value=time_limit, note="default --time; submit --time overrides"),
        Entry(key="max_time", value=part.max_time, note="the partition's MaxTime"),
    ]


def validate(detected: Detected, name: str) -> Cluster:
    """The profile as `--cluster` would load it: a value evalpipe refuses fails here, not later."""
    return build(Cluster, {"name": name, **detected.data()}, f"detected profile {name}")
