"""JobSpec: one plan on one cluster with the run's options, checked and sized for sbatch (pure)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import PurePath
from typing import Literal, get_args

from evalpipe.catalog.registry import (
    Cluster,
    Gpu,
    Preset,
    check_max_restarts,
    check_signal_seconds,
    get_gpu,
    slurm_minutes,
)
from evalpipe.core.errors import ConfigError, DoesNotFitError
from evalpipe.engine.factory import check_backend
from evalpipe.estimate.autosize import MARGIN
from evalpipe.planning import planner
from evalpipe.planning.memory import max_seqs
from evalpipe.planning.planner import Plan
from evalpipe.run.serve import READY_TIMEOUT_S, served_name
from evalpipe.run.watchdog import check_stall_timeout
from evalpipe.tasks.base import check_limit

# Characters a run directory may not hold: SLURM expands % in --output patterns, and #SBATCH
# lines cannot carry quotes, backslashes or line breaks.
_BAD_RUN_DIR = re.compile(r'[%"\\\n\r]')
MERGE_MINUTES = 30  # the merge job's time limit, when the job's own is not shorter
# How a job runs the model: in the runner's process (vLLM's LLM), or behind vLLM's
# OpenAI-compatible server that the job starts and the runner talks to (docs/slurm.md).
JobMode = Literal["engine", "serve"]
JOB_MODES: tuple[str, ...] = get_args(JobMode)


@dataclass(frozen=True, kw_only=True)
class JobOptions:
    """What the user chose for one submission; None means the cluster's or the preset's value."""

    categories: tuple[str, ...] | None = None
    tasks: tuple[str, ...] | None = None
    limit: int | None = None
    mc_method: str | None = None  # None: each multiple-choice task file's method
    shards: int = 1
    time: str | None = None
    signal_seconds: int | None = None
    max_restarts: int | None = None
    backend: str = "vllm"
    tp: int | None = None
    pp: int | None = None
    replicas: int | None = None  # None: the cluster's
    max_model_len: int | None = None
    smoke: bool = False  # the job runs `evalpipe smoke --local` instead of the evaluation
    stall_timeout: float | None = None  # None: the runner sizes it; 0: no watchdog
    # Chosen from the cost estimate (evalpipe/estimate/autosize.py): shards and time limit, within
    # `margin` of the limit, or the layout meeting `target_wall` with the fewest GPU-hours.
    auto_shards: bool = False
    auto_time: bool = False
    target_wall: str | None = None
    margin: float = MARGIN
    mode: JobMode = "engine"

    def __post_init__(self) -> None:
        check_backend(self.backend)
        check_limit(self.limit)
        check_stall_timeout(self.stall_timeout)
        if self.mode not in JOB_MODES:
            raise ConfigError(f"--mode {self.mode!r} is not one of {', '.join(JOB_MODES)}.")
        if self.mode == "serve" and (self.backend != "vllm" or self.smoke):
            raise ConfigError(
                f"--mode serve starts vLLM's server and evaluates through it: it needs the "
                f"vllm backend (got --backend {self.backend}) and is not a smoke test. Drop "
                "--backend (or --mode serve)."
            )
        if self.shards < 1:
            raise ConfigError(f"--shards must be 1 or more, got {self.shards}.")
        if not 0 < self.margin <= 1:
            raise ConfigError(
                f"--margin {self.margin} must be a share of the time limit in (0, 1], e.g. 0.8."
            )
        if self.auto_chosen and self.backend != "vllm":
            raise ConfigError(
                f"--shards auto, --time auto and --target-wall size vLLM jobs from their cost "
                f"estimate; --backend {self.backend} has none. Give --shards N and --time."
            )
        try:
            if self.target_wall is not None:
                slurm_minutes(self.target_wall)
            if self.time is not None:
                slurm_minutes(self.time)
            if self.signal_seconds is not None:
                check_signal_seconds(self.signal_seconds)
            if self.max_restarts is not None:
                check_max_restarts(self.max_restarts)
        except ValueError as exc:
            raise ConfigError(f"{exc}.") from None

    @property
    def auto_chosen(self) -> bool:
        """Whether the estimate decides shards, replicas or the time limit."""
        return self.auto_shards or self.auto_time or self.target_wall is not None


@dataclass(frozen=True, kw_only=True)
class JobSpec:
    """Everything a template needs: the plan, the site and the run, already validated."""

    preset: Preset
    preset_ref: str  # what the job passes to `evalpipe run --preset`: a name or a path
    cluster: Cluster
    plan: Plan
    run_dir: str  # absolute, so the job finds it from any working directory
    categories: tuple[str, ...] | None
    tasks: tuple[str, ...] | None
    limit: int | None
    mc_method: str | None
    shards: int
    time_limit: str
    signal_seconds: int
    max_restarts: int
    backend: str
    smoke: bool = False
    stall_timeout: float | None = None
    mode: JobMode = "engine"

    @property
    def serve(self) -> bool:
        """The job starts vLLM's server and the runner evaluates through it."""
        return self.mode == "serve"

    @property
    def served_model(self) -> str:
        return served_name(self.preset)

    @property
    def serve_timeout_s(self) -> int:
        return int(READY_TIMEOUT_S)

    @property
    def serve_concurrency(self) -> int:
        """Requests the runner keeps in flight against the job's server: as the in-process
        engine's window, a full batch per replica and as many queued (vLLM's max_num_seqs for
        the GPU, or the preset's)."""
        return 2 * max_seqs(self.preset, get_gpu(self.plan.gpu)) * self.plan.replicas

    @property
    def server_options(self) -> list[tuple[str, str]]:
        """`evalpipe serve` options (not --port): the plan's layout for the server."""
        plan = self.plan
        options = [
            ("--preset", self.preset_ref),
            ("--tp", str(plan.tensor_parallel_size)),
            ("--pp", str(plan.pipeline_parallel_size)),
            ("--replicas", str(plan.replicas)),
            ("--max-model-len", str(plan.max_model_len)),
        ]
        if self.multi_node:
            options.append(("--distributed-executor-backend", "ray"))
        return options

    @property
    def command(self) -> list[str]:
        """The evalpipe subcommand the job runs."""
        return ["smoke", "--local"] if self.smoke else ["run"]

    @property
    def nodes(self) -> int:
        return self.plan.nodes

    @property
    def gpus_per_node(self) -> int:
        return self.plan.gpus_per_node

    @property
    def multi_node(self) -> bool:
        return self.plan.nodes > 1

    @property
    def template(self) -> str:
        return "multi_node.sbatch.j2" if self.multi_node else "single_node.sbatch.j2"

    @property
    def cpus_per_task(self) -> int:
        """The job's share of a node's CPUs, in proportion to the GPUs it uses there."""
        c = self.cluster
        return max(1, c.cpus_per_node * self.gpus_per_node // c.gpus_per_node)

    @property
    def mem_mb(self) -> int:
        """The job's share of a node's memory, in proportion to the GPUs it uses there."""
        c = self.cluster
        return c.memory_per_node_gib * 1024 * self.gpus_per_node // c.gpus_per_node

    @property
    def gpu_count(self) -> str:
        """The GPUs on each node as SLURM writes them: TYPE:N where the site types its GPUs."""
        c = self.cluster
        return f"{c.gres_name}:{self.gpus_per_node}" if c.gres_name else str(self.gpus_per_node)

    @property
    def gpu_request(self) -> str:
        """The #SBATCH option that asks for the GPUs on each node."""
        if self.cluster.gpu_request == "gres":
            return f"--gres=gpu:{self.gpu_count}"
        return f"--gpus-per-node={self.gpu_count}"

    @property
    def job_name(self) -> str:
        # Job names show up in squeue and in log file names: keep them to safe characters.
        return "evalpipe-" + re.sub(r"[^A-Za-z0-9_.-]", "_", self.preset.name)

    @property
    def log_pattern(self) -> str:
        task = "%A_%a" if self.shards > 1 else "%j"
        return f"{self.run_dir}/logs/%x-{task}.out"

    @property
    def merge_time(self) -> str:
        minutes = min(MERGE_MINUTES, slurm_minutes(self.time_limit))
        return f"{minutes // 60:02d}:{minutes % 60:02d}:00"

    @property
    def runner_options(self) -> list[tuple[str, str]]:
        """`evalpipe run` options every task of the job shares (not --shard and --out)."""
        plan = self.plan
        if self.serve:  # the layout is the server's; the template adds --base-url
            options = [
                ("--preset", self.preset_ref),
                ("--backend", "openai"),
                ("--max-model-len", str(plan.max_model_len)),
                ("--concurrency", str(self.serve_concurrency)),
            ]
        else:
            options = [
                ("--preset", self.preset_ref),
                ("--backend", self.backend),
                ("--tp", str(plan.tensor_parallel_size)),
                ("--pp", str(plan.pipeline_parallel_size)),
                ("--replicas", str(plan.replicas)),
                ("--max-model-len", str(plan.max_model_len)),
            ]
        if self.multi_node and not self.serve:
            options.append(("--distributed-executor-backend", "ray"))
        if self.smoke:  # smoke plans again for the comparison: the same GPU and node size
            gpus = str(self.cluster.gpus_per_node)
            return [*options, ("--gpu", self.plan.gpu), ("--gpus-per-node", gpus)]
        if self.categories:
            options.append(("--categories", ",".join(self.categories)))
        if self.tasks:
            options.append(("--tasks", ",".join(self.tasks)))
        if self.limit is not None:
            options.append(("--limit", str(self.limit)))
        if self.mc_method is not None:
            options.append(("--mc-method", self.mc_method))
        if self.stall_timeout is not None:
            options.append(("--stall-timeout", f"{self.stall_timeout:g}"))
        return options

    @property
    def python_argv(self) -> list[str]:
        return shlex.split(self.cluster.python)

    @property
    def env(self) -> list[tuple[str, str]]:
        """Variables the job exports: the profile's, then the paths it names."""
        c = self.cluster
        pairs = [(k, str(v)) for k, v in c.env.items()]
        for name, value in (
            ("EVALPIPE_CACHE", c.cache_dir),
            ("HF_HOME", c.hf_cache),
            ("TMPDIR", c.scratch_dir),
        ):
            if value is not None:
                pairs.append((name, value))
        return pairs


def make_jobspec(
    *,
    preset: Preset,
    preset_ref: str,
    cluster: Cluster,
    gpu: Gpu,
    options: JobOptions,
    run_dir: str,
) -> JobSpec:
    """Plan `preset` on the cluster's nodes and check the options against the site's limits."""
    if gpu.name != cluster.gpu:
        raise ConfigError(f"GPU {gpu.name!r} is not cluster {cluster.name}'s GPU {cluster.gpu!r}.")
    if not PurePath(run_dir).is_absolute():
        raise ConfigError(f"The run directory must be an absolute path, got {run_dir!r}.")
    if _BAD_RUN_DIR.search(run_dir):
        raise ConfigError(
            f"The run directory {run_dir!r} holds a %, quote, backslash or line break, which "
            "SLURM's --output cannot carry. Choose a plainer path with --out."
        )
    try:
        plan = planner.plan(
            preset,
            gpu,
            gpus_per_node=cluster.gpus_per_node,
            tp=options.tp,
            pp=options.pp,
            max_model_len=options.max_model_len,
            max_nodes=cluster.max_nodes,
            overhead_correction_gib=cluster.overhead_correction_gib,
            replicas=options.replicas if options.replicas is not None else cluster.replicas,
        )
    except DoesNotFitError as exc:
        raise DoesNotFitError(
            f"{exc}\nCluster {cluster.name} allows at most {cluster.max_nodes} node(s) of "
            f"{cluster.gpus_per_node} × {gpu.name} (max_nodes and gpus_per_node in its profile)."
        ) from None
    if not plan.fits:
        raise DoesNotFitError(
            f"{preset.name} with TP={plan.tensor_parallel_size} × PP="
            f"{plan.pipeline_parallel_size} does not fit on cluster {cluster.name}'s "
            f"{gpu.name}: " + "; ".join(plan.notes)
        )
    time_limit = options.time or cluster.time_limit  # both checked by their records
    minutes = slurm_minutes(time_limit)
    if cluster.max_time is not None and minutes > slurm_minutes(cluster.max_time):
        raise ConfigError(
            f"--time {time_limit} exceeds cluster {cluster.name}'s limit of {cluster.max_time}. "
            "Ask for less; a checkpointed job requeues itself to continue."
        )
    signal_seconds = (
        cluster.signal_seconds if options.signal_seconds is None else options.signal_seconds
    )
    if signal_seconds >= minutes * 60:
        raise ConfigError(
            f"The preemption warning ({signal_seconds} s before the end) must come after the "
            f"job starts: the time limit is {time_limit}. Lower --signal-seconds or raise --time."
        )
    max_restarts = cluster.max_restarts if options.max_restarts is None else options.max_restarts
    return JobSpec(
        preset=preset,
        preset_ref=preset_ref,
        cluster=cluster,
        plan=plan,
        run_dir=run_dir,
        categories=options.categories,
        tasks=options.tasks,
        limit=options.limit,
        mc_method=options.mc_method,
        shards=options.shards,
        time_limit=time_limit,
        signal_seconds=signal_seconds,
        max_restarts=max_restarts,
        backend=options.backend,
        smoke=options.smoke,
        stall_timeout=options.stall_timeout,
        mode=options.mode,
    )
