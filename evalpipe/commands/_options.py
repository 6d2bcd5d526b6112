"""Command-line options shared by subcommands: argument types, and the option groups that
`evalpipe run` and the job commands (`render`, `submit`) both take, defined once."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from evalpipe.engine.factory import BACKENDS
from evalpipe.estimate.autosize import MARGIN
from evalpipe.jobs.jobspec import JOB_MODES, JobOptions

# evalpipe.tasks.config.METHODS, spelled out: importing the task package would cost the
# planning commands ~50 ms of startup (a test keeps the two equal).
MC_METHODS = ("generate", "logprobs")
AUTO = "auto"  # --shards auto, --time auto: chosen from the cost estimate


def names(text: str) -> tuple[str, ...]:
    """A comma-separated list of names."""
    items = tuple(n.strip() for n in text.split(",") if n.strip())
    if not items:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of names, got {text!r}")
    return items


def _int_from(text: str, minimum: int, expected: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    return _int_from(text, 1, "a positive integer")


def count(text: str) -> int:
    return _int_from(text, 0, "0 or a positive integer")


def seconds(text: str) -> float:
    """A positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def stall_seconds(text: str) -> float:
    """--stall-timeout: 0 (off) or a positive, finite number of seconds."""
    from evalpipe.core.errors import ConfigError
    from evalpipe.run.watchdog import check_stall_timeout

    try:
        value = float(text)
        check_stall_timeout(value)
    except (ValueError, ConfigError) as exc:
        raise argparse.ArgumentTypeError(
            f"expected 0 (off) or a positive number of seconds, got {text!r}"
        ) from exc
    return value


def add_stall_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--stall-timeout",
        type=stall_seconds,
        metavar="S",
        help="end the run with diagnostics and exit 124 after S seconds without progress; 0: "
        "off (default: sized from the model, 15 min + 6 s per GiB of weights while loading, "
        "10 min while generating)",
    )


def add_selection_arguments(parser: argparse.ArgumentParser) -> None:
    """Which tasks and how many samples of each."""
    parser.add_argument("--categories", type=names, help="comma list (default: the preset's)")
    parser.add_argument("--tasks", type=names, help="comma list of task names")
    parser.add_argument("--limit", type=positive_int, help="at most N samples per task")
    parser.add_argument(
        "--mc-method",
        choices=MC_METHODS,
        help="how multiple-choice tasks answer: generate a completion and extract the letter, "
        "or rank the option letters by log-probability (default: each task file's)",
    )


def add_engine_arguments(parser: argparse.ArgumentParser, *, layout_default: str) -> None:
    """The engine and its layout; `layout_default` says where --tp/--pp come from when absent."""
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default="vllm",
        help="engine; fake: the deterministic test engine, no model; openai: a model behind an "
        "OpenAI-compatible server (default vllm)",
    )
    parser.add_argument(
        "--tp", type=positive_int, help=f"tensor parallel size (default: {layout_default})"
    )
    parser.add_argument(
        "--pp", type=positive_int, help=f"pipeline parallel size (default: {layout_default})"
    )
    add_replicas_argument(parser)
    parser.add_argument(
        "--max-model-len", type=positive_int, help="context length (default: the preset's)"
    )


def add_replicas_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--replicas",
        type=positive_int,
        help="copies of the model side by side on a node, each on its own TP × PP GPUs "
        "(default: fill the node's GPUs; a cluster profile may set it; 1 on a CPU)",
    )


def add_cluster_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cluster",
        required=True,
        help="cluster profile: a name from configs/clusters/ or a path to a YAML file",
    )


def shards_or_auto(text: str) -> int | str:
    return AUTO if text == AUTO else positive_int(text)


def add_results_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--results",
        type=Path,
        action="append",
        help="folder of past runs and smoke records the estimate calibrates on; repeatable "
        "(default: results)",
    )


def add_job_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_argument(parser)
    add_selection_arguments(parser)
    parser.add_argument(
        "--shards",
        type=shards_or_auto,
        default=1,
        help="split the samples over an array of N jobs, merged by a dependent job (default 1); "
        "auto: the fewest whose predicted wall time fits the time limit with the margin",
    )
    parser.add_argument(
        "--time",
        help="time limit, e.g. 04:00:00 (default: the cluster's); auto: the predicted wall "
        "time over the margin",
    )
    parser.add_argument(
        "--target-wall",
        metavar="HH:MM",
        help="results by then: the replicas and shards that meet it with the fewest GPU-hours",
    )
    parser.add_argument(
        "--margin",
        type=float,
        default=MARGIN,
        help=f"share of the time limit a predicted wall time may fill (default {MARGIN:g})",
    )
    add_results_argument(parser)
    parser.add_argument(
        "--signal-seconds",
        type=count,
        help="send the checkpoint signal this long before the time limit (default: the cluster's)",
    )
    parser.add_argument(
        "--max-restarts",
        type=count,
        help="requeues after a checkpointed stop (default: the cluster's)",
    )
    add_engine_arguments(parser, layout_default="planned")
    add_stall_argument(parser)
    parser.add_argument(
        "--mode",
        choices=JOB_MODES,
        default="engine",
        help="engine: vLLM in the runner's process; serve: the job starts vLLM's "
        "OpenAI-compatible server with the plan's layout and evaluates through it "
        "(docs/slurm.md; default engine)",
    )


def job_options(args: argparse.Namespace) -> JobOptions:
    auto_time = args.time == AUTO
    target = args.target_wall
    return JobOptions(
        categories=args.categories,
        tasks=args.tasks,
        limit=args.limit,
        mc_method=args.mc_method,
        shards=1 if args.shards == AUTO else args.shards,
        auto_shards=args.shards == AUTO,
        time=None if auto_time else args.time,
        # HH:MM as the help says; SLURM alone would read "12:00" as minutes:seconds.
        target_wall=f"{target}:00" if target and target.count(":") == 1 else target,
        auto_time=auto_time,
        margin=args.margin,
        signal_seconds=args.signal_seconds,
        max_restarts=args.max_restarts,
        backend=args.backend,
        tp=args.tp,
        pp=args.pp,
        replicas=args.replicas,
        max_model_len=args.max_model_len,
        stall_timeout=args.stall_timeout,
        mode=args.mode,
    )
