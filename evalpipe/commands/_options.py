"""Command-line options shared by subcommands: the cluster and the results folders, and the job
commands' (`render`, `submit`) options, added from the records that declare them."""

from __future__ import annotations

import argparse
from pathlib import Path

from evalpipe.core.options import add_options, from_args
from evalpipe.jobs.jobspec import JOB, JOB_RUNNER_GROUPS, JobOptions
from evalpipe.run.runoptions import RunnerOptions


def add_cluster_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cluster",
        required=True,
        help="cluster profile: a name from configs/clusters/ or a path to a YAML file",
    )


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
    add_options(parser, RunnerOptions, groups=JOB_RUNNER_GROUPS, help_values={"layout": "planned"})
    add_options(parser, JobOptions, groups=(JOB,))
    add_results_argument(parser)


def job_options(args: argparse.Namespace) -> JobOptions:
    run = from_args(RunnerOptions, args, groups=JOB_RUNNER_GROUPS)
    return from_args(JobOptions, args, groups=(JOB,), run=run)
