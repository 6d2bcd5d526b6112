"""Cluster profiles: configs/clusters/*.yaml → a frozen Cluster, one SLURM site each."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from evalpipe.catalog.configpath import resolve
from evalpipe.catalog.containers import LAUNCHERS, Container
from evalpipe.catalog.gpus import get_gpu
from evalpipe.catalog.slurmtime import check_signal_seconds, slurm_minutes
from evalpipe.core.configio import ENV_NAME, build, check_positive, read_yaml
from evalpipe.core.isolation import ISOLATION_LEVELS, IsolationLevel

GpuRequest = Literal["gres", "gpus-per-node"]
GPU_REQUESTS: tuple[str, ...] = get_args(GpuRequest)
# Experiment trackers a run can log to (`--track`, a cluster's `track:`).
Tracker = Literal["wandb", "mlflow"]
TRACKERS: tuple[str, ...] = get_args(Tracker)
# Partition, account, QOS and GRES names go into #SBATCH lines: plain SLURM names only.
_SLURM_NAME = re.compile(r"[A-Za-z0-9_.+-]+")


def check_max_restarts(value: object) -> None:
    """Requeues allowed after a checkpointed stop (ValueError if not a count)."""
    if not isinstance(value, int) or value < 0:
        raise ValueError(f"max_restarts must be 0 or more, got {value!r}")


def _one_line(where: str, key: str, values: tuple[str, ...]) -> None:
    for value in values:
        if not isinstance(value, str) or "\n" in value or "\r" in value:
            raise ValueError(f"each {key} entry must be one line of text, got {value!r} ({where})")


@dataclass(frozen=True, kw_only=True)
class RaySettings:
    """The Ray cluster a multi-node job starts inside its allocation.

    Node i (0 = head) takes ports from `node_port_base + i * node_port_stride` upwards, so
    several nodes can share one host (the local test cluster) without colliding.
    """

    port: int = 6379  # the head's GCS port
    node_port_base: int = 20000
    node_port_stride: int = 1000
    object_store_gib: float | None = None  # None: Ray's default (30% of the node's memory)

    def __post_init__(self) -> None:
        check_positive(
            "ray",
            port=self.port,
            node_port_base=self.node_port_base,
            node_port_stride=self.node_port_stride,
        )
        if self.object_store_gib is not None and self.object_store_gib < 0.08:
            raise ValueError(
                f"object_store_gib must be at least 0.08 (Ray's minimum), "
                f"got {self.object_store_gib}"
            )
        if self.node_port_stride < 200:
            raise ValueError(f"node_port_stride must be at least 200, got {self.node_port_stride}")


@dataclass(frozen=True, kw_only=True)
class Cluster:
    """Facts about one SLURM site: where jobs go, what a node has, how to set up a job."""

    name: str
    description: str = ""
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    gpu: str  # a name from configs/gpus.yaml
    gres_name: str | None = None  # SLURM's type for that GPU (gpu:TYPE:N); None: untyped
    gpu_request: GpuRequest = "gres"  # "gres": --gres=gpu:TYPE:N, or --gpus-per-node=N
    gpus_per_node: int
    cpus_per_node: int
    memory_per_node_gib: int  # what a job may request per node, not the physical total
    max_nodes: int = 1
    time_limit: str = "04:00:00"  # default --time
    max_time: str | None = None  # the partition's limit; longer requests are refused up front
    signal_seconds: int = 300  # preemption warning: SIGUSR1 this long before the time limit
    max_restarts: int = 3  # requeues after a checkpointed stop
    # Copies of a model that fits in fewer GPUs than a node has, side by side in one job (data
    # parallel); None fills the node (gpus_per_node // (TP × PP)). `evalpipe render` and the
    # run inside the job both take it from here unless --replicas is given.
    replicas: int | None = None
    test_only: bool = True  # the site allows `sbatch --test-only`
    # The command that runs Python in a job (a path, or the image's python under `container`).
    python: str = "python3"
    # The image every process of the job runs in (pyxis or Apptainer); None: the node's own.
    container: Container | None = None
    # Shell lines run first in every job (module load, venv activation). The only field that
    # is shell code by design: it comes from the site's own profile, like a login script.
    setup: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)  # exported, values quoted literally
    cache_dir: str | None = None  # EVALPIPE_CACHE: prepared model weights
    hf_cache: str | None = None  # HF_HOME
    scratch_dir: str | None = None  # TMPDIR (Ray's temp dirs go there)
    sbatch_extra: tuple[str, ...] = ()  # further options, e.g. "--constraint=h100"
    # GiB added to the planner's runtime overhead per GPU: what `evalpipe smoke` measured here
    # beyond the plan (negative when the plan was generous).
    overhead_correction_gib: float = 0.0
    ray: RaySettings = field(default_factory=RaySettings)
    # The tracker every job on this site logs to unless --track says otherwise; None: none.
    track: Tracker | None = None
    # The weakest code-sandbox isolation jobs here accept unless --sandbox says otherwise;
    # None: full. `weak` suits a site whose containers refuse namespaces (docs/sandbox.md).
    sandbox: IsolationLevel | None = None

    def __post_init__(self) -> None:
        where = f"cluster {self.name}"
        if self.track is not None and self.track not in TRACKERS:
            raise ValueError(f"track {self.track!r} is not one of {', '.join(TRACKERS)}")
        if self.sandbox is not None and self.sandbox not in ISOLATION_LEVELS:
            raise ValueError(
                f"sandbox {self.sandbox!r} is not one of {', '.join(ISOLATION_LEVELS)}; leave it "
                "out for full isolation"
            )
        check_positive(
            where,
            gpus_per_node=self.gpus_per_node,
            cpus_per_node=self.cpus_per_node,
            memory_per_node_gib=self.memory_per_node_gib,
            max_nodes=self.max_nodes,
        )
        check_max_restarts(self.max_restarts)
        if self.replicas is not None and (not isinstance(self.replicas, int) or self.replicas < 1):
            raise ValueError(
                f"replicas must be 1 or more (or left out to fill each node), got {self.replicas!r}"
            )
        for key in ("partition", "account", "qos", "gres_name"):
            value = getattr(self, key)
            if value is not None and not _SLURM_NAME.fullmatch(str(value)):
                raise ValueError(
                    f"{key} {value!r} is not a SLURM name (letters, digits, _ . + - only)"
                )
        if self.gpu_request not in GPU_REQUESTS:
            raise ValueError(
                f"gpu_request {self.gpu_request!r} is not one of {', '.join(GPU_REQUESTS)}"
            )
        for key in ("time_limit", "max_time"):
            value = getattr(self, key)
            if value is not None and not isinstance(value, str):
                # YAML 1.1 reads an unquoted 04:00:00 as the number 14400.
                raise ValueError(f"{key} must be a quoted string such as '04:00:00', got {value!r}")
            if value is not None:
                slurm_minutes(value)
        if self.max_time is not None and slurm_minutes(self.time_limit) > slurm_minutes(
            self.max_time
        ):
            raise ValueError(f"time_limit {self.time_limit} exceeds max_time {self.max_time}")
        check_signal_seconds(self.signal_seconds)
        _one_line(where, "setup", self.setup)
        _one_line(where, "sbatch_extra", self.sbatch_extra)
        for option in self.sbatch_extra:
            if not option.startswith("--"):
                raise ValueError(f"sbatch_extra takes long options (--name=value), got {option!r}")
        _one_line(where, "python", (self.python,))
        try:
            words = shlex.split(self.python)
        except ValueError as exc:
            raise ValueError(f"python {self.python!r} is not a valid command line: {exc}") from None
        if not words:
            raise ValueError("python must name a command, got an empty string")
        if self.container is not None and Path(words[0]).name in LAUNCHERS:
            raise ValueError(
                f"python {self.python!r} wraps Python in a container, and the profile's "
                f"container: block launches {self.container.runtime} itself: set python to "
                "the image's own python (python3), or drop the container: block"
            )
        for key, value in self.env.items():
            if not isinstance(key, str) or not ENV_NAME.fullmatch(key):
                raise ValueError(f"env name {key!r} is not a shell variable name")
            if not isinstance(value, str | int | float) or isinstance(value, bool):
                raise ValueError(f"env {key} must be text or a number, got {value!r}")
        paths = (self.cache_dir, self.hf_cache, self.scratch_dir)
        _one_line(where, "path", tuple(p for p in paths if p is not None))


def load_cluster(name_or_path: str) -> Cluster:
    """A cluster profile by registry name or YAML path; its GPU must be in the catalogue."""
    name, path = resolve("cluster", "clusters", name_or_path)
    data = read_yaml(path)
    data.setdefault("name", name)
    cluster = build(Cluster, data, str(path))
    get_gpu(cluster.gpu)
    return cluster
