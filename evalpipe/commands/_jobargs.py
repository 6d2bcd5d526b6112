"""Options shared by `evalpipe render` and `evalpipe submit`: what to run and how to size it."""

from __future__ import annotations

import argparse

from evalpipe.jobspec import BACKENDS, JobOptions


def names(text: str) -> tuple[str, ...]:
    """A comma-separated list of names."""
    items = tuple(n.strip() for n in text.split(",") if n.strip())
    if not items:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of names, got {text!r}")
    return items


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or a positive integer, got {text!r}")
    return value


def add_job_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cluster",
        required=True,
        help="cluster profile: a name from configs/clusters/ or a path to a YAML file",
    )
    parser.add_argument("--categories", type=names, help="comma list (default: the preset's)")
    parser.add_argument("--tasks", type=names, help="comma list of task names")
    parser.add_argument("--limit", type=positive_int, help="at most N samples per task")
    parser.add_argument(
        "--shards",
        type=positive_int,
        default=1,
        help="split the samples over an array of N jobs, merged by a dependent job (default 1)",
    )
    parser.add_argument("--time", help="time limit, e.g. 04:00:00 (default: the cluster's)")
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
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default="vllm",
        help="engine in the job; fake: the deterministic test engine, no model (default vllm)",
    )
    parser.add_argument("--tp", type=positive_int, help="tensor parallel size (default: planned)")
    parser.add_argument("--pp", type=positive_int, help="pipeline parallel size (default: planned)")
    parser.add_argument("--max-model-len", type=positive_int)


def job_options(args: argparse.Namespace) -> JobOptions:
    return JobOptions(
        categories=args.categories,
        tasks=args.tasks,
        limit=args.limit,
        shards=args.shards,
        time=args.time,
        signal_seconds=args.signal_seconds,
        max_restarts=args.max_restarts,
        backend=args.backend,
        tp=args.tp,
        pp=args.pp,
        max_model_len=args.max_model_len,
    )
