"""JobSpec: one plan on one cluster with the run's options, checked and sized for sbatch (pure)."""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePath
from typing import Literal, get_args

from evalpipe.catalog.clusters import Cluster, check_max_restarts
from evalpipe.catalog.containers import Container, Mount, is_image_file
from evalpipe.catalog.gpus import Gpu, get_gpu
from evalpipe.catalog.preset import Preset, load_preset
from evalpipe.catalog.selection import SELECTION
from evalpipe.catalog.slurmtime import check_signal_seconds, slurm_minutes
from evalpipe.catalog.taskrefs import check_selection
from evalpipe.core.errors import ConfigError, DoesNotFitError
from evalpipe.core.options import (
    check_options,
    count,
    flags_given,
    float_text,
    option,
    positive,
    positive_int,
    to_argv,
)
from evalpipe.core.provenance import CONTAINER_IMAGE, CONTAINER_RUNTIME
from evalpipe.estimate.autosize import MARGIN
from evalpipe.jobs.taskbudgets import task_model_len
from evalpipe.planning import planner
from evalpipe.planning.helperplacement import Placement
from evalpipe.planning.judgeplacement import choose_placement, plan_judge
from evalpipe.planning.memory import max_seqs
from evalpipe.planning.planner import Plan
from evalpipe.planning.usersimplacement import plan_user_sim
from evalpipe.run.runoptions import (
    ENGINE,
    EXECUTOR,
    GENERATION,
    GROUPS,
    JUDGE,
    LAYOUT,
    RUNTIME,
    TRACKING,
    USER_SIM,
    LayoutOptions,
    RunnerOptions,
)
from evalpipe.run.vllmserver import READY_TIMEOUT_S, served_name
from evalpipe.rundir.layout import RunDir

# Characters a run directory may not hold: SLURM expands % in --output patterns, and #SBATCH
# lines cannot carry quotes, backslashes or line breaks.
_BAD_RUN_DIR = re.compile(r'[%"\\\n\r]')
MERGE_MINUTES = 30  # the merge job's time limit, when the job's own is not shorter
# How a job runs the model: in the runner's process (vLLM's LLM), or behind vLLM's
# OpenAI-compatible server that the job starts and the runner talks to (docs/slurm.md).
JobMode = Literal["engine", "serve"]
JOB_MODES: tuple[str, ...] = get_args(JobMode)
AUTO: Literal["auto"] = "auto"  # --shards auto, --time auto: chosen from the cost estimate


def shards_or_auto(text: str) -> int | Literal["auto"]:
    return AUTO if text == AUTO else positive_int(text)


def _shards(value: int | Literal["auto"]) -> None:
    if value != AUTO:
        positive(value)


def _time(value: str) -> None:
    if value != AUTO:
        slurm_minutes(value)


def hours_minutes(text: str) -> str:
    """--target-wall: HH:MM as the help says; SLURM alone would read "12:00" as minutes:seconds."""
    return f"{text}:00" if text.count(":") == 1 else text


def _margin(value: float) -> None:
    if not 0 < value <= 1:
        raise ValueError(f"{value} must be a share of the time limit in (0, 1], e.g. 0.8")


def _budget(value: float) -> None:
    if not 0 < value < math.inf:
        raise ValueError(f"{value} must be a positive number of GPU-hours, e.g. 40")


JOB = "job"  # the option group of JobOptions' own flags
# The runner's options a submission takes; the job sets the executor, the endpoint (a serve
# job's own server) and each array task's shard itself. A judged run's job holds both phases:
# the judge after generation, or side by side with it (planning/judgeplacement.py).
JOB_RUNNER_GROUPS = (SELECTION, ENGINE, GENERATION, LAYOUT, RUNTIME, JUDGE, USER_SIM, TRACKING)
# What `evalpipe smoke --local` takes: the model and its layout, no tasks.
SMOKE_RUNNER_GROUPS = (ENGINE, LAYOUT)


@dataclass(frozen=True, kw_only=True)
class JobOptions:
    """What the user chose for one submission; None means the cluster's or the preset's value."""

    # What every task of the job tells its runner; the plan fills in the layout.
    run: RunnerOptions = field(default_factory=RunnerOptions)
    # auto (here and for --time): chosen from the cost estimate (evalpipe/estimate/autosize.py)
    shards: int | Literal["auto"] = option(
        default=1,
        flag="--shards",
        group=JOB,
        parse=shards_or_auto,
        check=_shards,
        help="split the samples over an array of N jobs, merged by a dependent job (default 1); "
        "auto: the fewest whose predicted wall time fits the time limit with the margin",
    )
    time: str | None = option(
        flag="--time",
        group=JOB,
        check=_time,
        help="time limit, e.g. 04:00:00 (default: the cluster's); auto: the predicted wall "
        "time over the margin",
    )
    target_wall: str | None = option(
        flag="--target-wall",
        group=JOB,
        parse=hours_minutes,
        check=slurm_minutes,
        metavar="HH:MM",
        help="results by then: the replicas and shards that meet it with the fewest GPU-hours",
    )
    budget: float | None = option(
        flag="--budget",
        group=JOB,
        parse=float,
        text=float_text,
        check=_budget,
        metavar="GPU_HOURS",
        help="refuse to submit when the estimate's expected GPU-hours exceed this, saying by "
        "how much and what would fit (docs/planner.md, Pilot)",
    )
    margin: float = option(
        default=MARGIN,
        flag="--margin",
        group=JOB,
        parse=float,
        text=float_text,
        check=_margin,
        help=f"share of the time limit a predicted wall time may fill (default {MARGIN:g})",
    )
    signal_seconds: int | None = option(
        flag="--signal-seconds",
        group=JOB,
        parse=count,
        check=check_signal_seconds,
        help="send the checkpoint signal this long before the time limit (default: the cluster's)",
    )
    max_restarts: int | None = option(
        flag="--max-restarts",
        group=JOB,
        parse=count,
        check=check_max_restarts,
        help="requeues after a checkpointed stop (default: the cluster's)",
    )
    mode: JobMode = option(
        default="engine",
        flag="--mode",
        group=JOB,
        choices=JOB_MODES,
        help="engine: vLLM in the runner's process; serve: the job starts vLLM's "
        "OpenAI-compatible server with the plan's layout and evaluates through it "
        "(docs/slurm.md; default engine)",
    )
    container_image: str | None = option(
        flag="--container-image",
        group=JOB,
        metavar="IMAGE",
        help="run the job in this image instead of the cluster profile's container.image (a "
        "registry reference, a .sqsh or a .sif path; the profile's container: block says how)",
    )
    smoke: bool = False  # the job runs `evalpipe smoke --local` instead of the evaluation

    def __post_init__(self) -> None:
        check_options(self)
        backend = self.run.engine.backend
        taken = SMOKE_RUNNER_GROUPS if self.smoke else JOB_RUNNER_GROUPS
        others = flags_given(self.run, tuple(g for g in GROUPS if g not in taken))
        if others:
            raise ConfigError(
                f"{', '.join(others)}: a {'smoke ' if self.smoke else ''}job's runner does not "
                "take these from the submission; drop them."
            )
        if self.mode == "serve" and (backend != "vllm" or self.smoke):
            raise ConfigError(
                f"--mode serve starts vLLM's server and evaluates through it: it needs the "
                f"vllm backend (got --backend {backend}) and is not a smoke test. Drop "
                "--backend (or --mode serve)."
            )
        if self.run.judge.named and self.shards != 1 and self.run.judge.phase != "generate":
            raise ConfigError(
                f"--shards {self.shards} with a judge: each shard would judge only its own "
                "answers and a merge keeps no judgments. Submit with --shards 1, or --phase "
                "generate, then judge the merged run with `evalpipe run --phase judge`."
            )
        if self.auto_chosen and backend != "vllm":
            raise ConfigError(
                f"--shards auto, --time auto and --target-wall size vLLM jobs from their cost "
                f"estimate; --backend {backend} has none. Give --shards N and --time."
            )
        if self.run.selection.pilot is not None and self.shards not in (1, AUTO):
            raise ConfigError(
                f"--pilot {self.run.selection.pilot} is one job over a sample of every task, not "
                f"--shards {self.shards}: drop --shards (the full run after it, "
                "`submit --after-pilot`, is sharded from the pilot's figures)."
            )

    @property
    def auto_shards(self) -> bool:
        return self.shards == AUTO

    @property
    def auto_time(self) -> bool:
        return self.time == AUTO

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
    # The submission's options with the cluster's defaults filled in (time limit, warning,
    # restarts) and nothing left to choose: shards and time are no longer `auto`.
    options: JobOptions
    # Where a judged job's judge runs, and what that asks of each node; None: no judging phase.
    placement: Placement | None = None
    # Where an agent job's user simulator runs (planning/usersimplacement.py), and its own
    # layout when the job serves it beside the model; None: no user simulator named.
    user_sim: Placement | None = None
    user_sim_plan: Plan | None = None

    @property
    def serve(self) -> bool:
        """The job starts vLLM's server and the runner evaluates through it."""
        return self.options.mode == "serve"

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
        return [("--preset", self.preset_ref), *to_argv(self._layout, groups=(LAYOUT, EXECUTOR))]

    @property
    def model_server(self) -> JobServer:
        """A server-mode job's vLLM server for the model (slurm_templates/_serve.sh.j2)."""
        return JobServer(
            var="", label="vLLM server", log="server", options=self.server_options,
            model=self.served_model,
        )  # fmt: skip

    @property
    def user_sim_beside(self) -> bool:
        """The user simulator runs side by side on GPUs of the job's own."""
        return self.user_sim is not None and self.user_sim.helper_gpus > 0

    @property
    def user_sim_server(self) -> JobServer | None:
        """The vLLM server the job starts for its user simulator side by side, on the node's
        GPUs after the model's (slurm_templates/_usersim.sh.j2); None when it needs none."""
        plan, placement = self.user_sim_plan, self.user_sim
        if plan is None or placement is None or not self.user_sim_beside:
            return None
        ref = self.options.run.user_sim.preset
        layout = LayoutOptions(
            tp=plan.tensor_parallel_size,
            pp=plan.pipeline_parallel_size,
            replicas=1,
            max_model_len=plan.max_model_len,
        )
        return JobServer(
            var="user_sim_",
            label="the user simulator's vLLM server",
            log="user-sim-server",
            options=[
                ("--preset", str(ref)),
                *to_argv(layout, groups=(LAYOUT,)),
                ("--skip-gpus", str(placement.model_gpus)),
            ],
            model=served_name(load_preset(str(ref))),
        )

    @property
    def _layout(self) -> LayoutOptions:
        """The plan's layout, as the runner or the job's server is told it."""
        plan = self.plan
        return LayoutOptions(
            tp=plan.tensor_parallel_size,
            pp=plan.pipeline_parallel_size,
            replicas=plan.replicas,
            max_model_len=plan.max_model_len,
            distributed_executor_backend="ray" if self.multi_node else None,
        )

    @property
    def command(self) -> list[str]:
        """The evalpipe subcommand the job runs."""
        return ["smoke", "--local"] if self.options.smoke else ["run"]

    @property
    def nodes(self) -> int:
        return self.plan.nodes

    @property
    def gpus_per_node(self) -> int:
        """The model's GPUs, or what both phases of a judged job need
        (planning/judgeplacement.py), or the model's and its user simulator's side by side."""
        if self.user_sim is not None and self.user_sim_beside:
            return self.user_sim.gpus_per_node
        return self.plan.gpus_per_node if self.placement is None else self.placement.gpus_per_node

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
        task = "%A_%a" if self.options.shards > 1 else "%j"
        return RunDir(Path(self.run_dir)).log_pattern(task)

    @property
    def merge_time(self) -> str:
        minutes = min(MERGE_MINUTES, slurm_minutes(self.options.time))
        return f"{minutes // 60:02d}:{minutes % 60:02d}:00"

    @property
    def runner(self) -> RunnerOptions:
        """The record every task of the job gives its runner (not the shard and the run
        directory, which each task adds): the submission's, with the plan's layout."""
        run = self.options.run
        if self.serve:  # the layout is the server's; the template adds --base-url
            run = replace(
                run,
                engine=replace(run.engine, backend="openai"),
                layout=LayoutOptions(max_model_len=self.plan.max_model_len),
                endpoint=replace(run.endpoint, concurrency=self.serve_concurrency),
            )
        else:
            run = replace(run, layout=self._layout)
        if self.placement is not None:  # the runner is told the planner's choice
            replicas = None if self.serve else self.placement.model_replicas
            run = replace(
                run,
                judge=replace(run.judge, placement=self.placement.kind),
                layout=replace(run.layout, replicas=replicas),
            )
        if self.user_sim is not None and self.user_sim_beside:
            # The model keeps the replicas its user simulator's GPUs leave it, on the node's
            # first GPUs; the template adds the server's URL and model name.
            run = replace(run, layout=replace(run.layout, replicas=self.user_sim.model_replicas))
        return run

    @property
    def runner_options(self) -> list[tuple[str, ...]]:
        """The runner's argv words, `runner` written out: (flag, value), or a switch's flag."""
        options = [("--preset", self.preset_ref), *to_argv(self.runner)]
        if self.options.smoke:  # smoke plans again for the comparison: the same GPU and node size
            gpus = str(self.cluster.gpus_per_node)
            return [*options, ("--gpu", self.plan.gpu), ("--gpus-per-node", gpus)]
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

    @property
    def container(self) -> Container | None:
        return self.cluster.container

    @property
    def container_mounts(self) -> list[str]:
        """What the image sees of the node: the run directory, the profile's caches and scratch
        (TMPDIR, else /tmp: Ray's session files, shared by every container on a node) at their
        own paths, then the profile's mounts; one per destination, the profile's winning."""
        c = self.cluster
        own = [self.run_dir, c.cache_dir, c.hf_cache, c.scratch_dir or "/tmp"]
        given = [Mount.parse(m) for m in self.container.mounts] if self.container else []
        taken = {m.destination for m in given}
        mounts = [Mount(source=p, destination=p) for p in dict.fromkeys(own) if p]
        return [m.spec() for m in given + [m for m in mounts if m.destination not in taken]]

    @property
    def container_record(self) -> list[tuple[str, str]]:
        """What the runner records of the image in its manifest (core/provenance.py), beside
        the evalpipe and vLLM versions it finds there."""
        c = self.container
        return (
            [] if c is None else [(CONTAINER_RUNTIME, c.runtime), (CONTAINER_IMAGE, c.launch_image)]
        )

    @property
    def container_env(self) -> list[str]:
        """Variables the job passes into the image by name: the ones it exports (the profile's
        env and paths, the image's record), then the container block's."""
        names = [name for name, _ in self.env + self.container_record]
        if self.container is not None:
            names += self.container.env
        return list(dict.fromkeys(names))

    @property
    def container_keep(self) -> str:
        """Under Apptainer (--containall empties the environment): a bash regex of the
        variables each launch passes in: SLURM's and slurmd's, the GPUs, HF_HOME, Ray's
        address, the job's."""
        # SLURMD_NODENAME too: it names the node's files (metrics-<node>.csv) and the host.
        fixed = ["SLURMD?_.*", "CUDA_VISIBLE_DEVICES", "HF_HOME", "RAY_ADDRESS"]
        return "^(" + "|".join(dict.fromkeys(fixed + self.container_env)) + ")$"


@dataclass(frozen=True, kw_only=True)
class JobServer:
    """A vLLM server the job starts on its node (slurm_templates/_vllm_server.sh.j2)."""

    var: str  # the prefix of its shell variables ("" for the model's own server)
    label: str  # how the job's log names it
    log: str  # its log file's name in logs/, before the job id
    options: list[tuple[str, str]]  # `evalpipe serve`'s, not --port
    model: str  # the name it serves the model under


def make_jobspec(
    *,
    preset: Preset,
    preset_ref: str,
    cluster: Cluster,
    gpu: Gpu,
    options: JobOptions,
    run_dir: str,
) -> JobSpec:
    """Plan `preset` on the cluster's nodes and check the options against the site's limits.

    Shards and a time limit left to the estimate are 1 and the cluster's here: the spec the
    estimate is made from."""
    if gpu.name != cluster.gpu:
        raise ConfigError(f"GPU {gpu.name!r} is not cluster {cluster.name}'s GPU {cluster.gpu!r}.")
    cluster = with_image(cluster, options.container_image)
    if not PurePath(run_dir).is_absolute():
        raise ConfigError(f"The run directory must be an absolute path, got {run_dir!r}.")
    if _BAD_RUN_DIR.search(run_dir):
        raise ConfigError(
            f"The run directory {run_dir!r} holds a %, quote, backslash or line break, which "
            "SLURM's --output cannot carry. Choose a plainer path with --out."
        )
    run = options.run
    check_selection(run.selection.categories, run.selection.tasks)
    wanted = task_model_len(preset, run.selection, run.layout.max_model_len)

    def plan_at(max_model_len: int | None) -> Plan:
        return planner.plan(
            preset,
            gpu,
            gpus_per_node=cluster.gpus_per_node,
            tp=run.layout.tp,
            pp=run.layout.pp,
            max_model_len=max_model_len,
            max_nodes=cluster.max_nodes,
            overhead_correction_gib=cluster.overhead_correction_gib,
            replicas=run.layout.replicas if run.layout.replicas is not None else cluster.replicas,
        )

    # A context raised for long budgets that does not fit falls back to the preset's; the
    # runner then caps the budgets to fit it, with a note (evalpipe/tasks/kinds.py).
    raised = wanted != run.layout.max_model_len
    try:
        try:
            plan: Plan | None = plan_at(wanted)
        except DoesNotFitError:
            if not raised:
                raise
            plan = None
        if raised and (plan is None or not plan.fits):
            plan = plan_at(run.layout.max_model_len)
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
    time_limit = cluster.time_limit if options.time in (None, AUTO) else options.time
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
    judged = judge_placement(plan, cluster, gpu, options)
    user_sim_plan, user_sim = user_sim_placement(preset, plan, cluster, gpu, options)
    if judged is not None and judged.helper_gpus and user_sim is not None and user_sim.helper_gpus:
        raise ConfigError(
            "A job holds one helper model beside its own: the judge and the user simulator both "
            "need GPUs here. Submit the judged and the agent tasks as separate jobs, or serve "
            "one of them elsewhere (--judge-base-url or --user-sim-base-url)."
        )
    return JobSpec(
        preset=preset,
        preset_ref=preset_ref,
        cluster=cluster,
        plan=plan,
        placement=judged,
        user_sim=user_sim,
        user_sim_plan=user_sim_plan,
        run_dir=run_dir,
        options=replace(
            options,
            shards=1 if options.auto_shards else options.shards,
            time=time_limit,
            signal_seconds=signal_seconds,
            max_restarts=max_restarts,
            # A smoke job tracks nothing: it evaluates no tasks.
            run=replace(
                run,
                tracking=replace(
                    run.tracking,
                    track=run.tracking.track or (None if options.smoke else cluster.track),
                ),
                runtime=replace(run.runtime, sandbox=run.runtime.sandbox or cluster.sandbox),
            ),
        ),
    )


def with_image(cluster: Cluster, image: str | None) -> Cluster:
    """The cluster with --container-image in place of its profile's image (checked as the
    profile's own would be)."""
    if image is None:
        return cluster
    if cluster.container is None:
        raise ConfigError(
            f"--container-image {image!r}: cluster {cluster.name}'s profile has no container: "
            "block saying how to run an image (runtime: pyxis or apptainer; docs/slurm.md, "
            "Containers). Add one, or drop --container-image."
        )
    # A file needs no pull cache; a reference keeps the profile's.
    cache = None if is_image_file(image) else cluster.container.sif_cache
    try:
        container = replace(cluster.container, image=image, sif_cache=cache)
    except ValueError as exc:
        raise ConfigError(f"--container-image: {exc}") from None
    return replace(cluster, container=container)


def judge_placement(
    model: Plan, cluster: Cluster, gpu: Gpu, options: JobOptions
) -> Placement | None:
    """Where the job's judge runs (None: the job does not judge). A judge preset is planned on
    the cluster's GPU like the model; a judge behind a server uses none of the job's GPUs."""
    asked = options.run.judge
    if not asked.named or asked.phase == "generate":
        return None
    judge = None
    if asked.endpoint.base_url is None and asked.preset is not None:
        judge = plan_judge(
            load_preset(asked.preset),
            gpu,
            gpus_per_node=cluster.gpus_per_node,
            overhead_correction_gib=cluster.overhead_correction_gib,
        )
    apart = None
    if options.mode == "serve":
        apart = "the job's vLLM server holds the model's GPUs (--mode serve)"
    elif asked.phase == "judge":
        apart = "the job only judges (--phase judge)"
    return choose_placement(
        model,
        judge,
        gpus_per_node=cluster.gpus_per_node,
        wanted=asked.placement or "auto",
        apart=apart,
    )


def user_sim_placement(
    preset: Preset, model: Plan, cluster: Cluster, gpu: Gpu, options: JobOptions
) -> tuple[Plan | None, Placement | None]:
    """Where the job's user simulator runs, and its own layout when the job serves it (None,
    None: no user simulator named). Refused, saying why, when it fits nowhere."""
    asked = options.run.user_sim
    if not asked.named:
        return None, None
    apart = None
    if options.mode == "serve":
        apart = "the job's vLLM server holds the model's GPUs (--mode serve)"
    return plan_user_sim(
        model,
        preset,
        asked.preset,
        served=asked.endpoint.base_url is not None,
        gpu=gpu,
        gpus_per_node=cluster.gpus_per_node,
        overhead_correction_gib=cluster.overhead_correction_gib,
        apart=apart,
    )
