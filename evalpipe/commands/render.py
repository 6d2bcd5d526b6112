"""`evalpipe render`: print the sbatch script for a preset on a cluster; nothing is submitted."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from evalpipe.commands._options import add_job_arguments, job_options


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", required=True, help="preset name or path to a preset YAML")
    add_job_arguments(parser)
    parser.add_argument(
        "--out",
        type=Path,
        help="the run directory the script writes to (default: results/<preset>-<time>-<hex>)",
    )
    parser.add_argument(
        "--merge",
        action="store_true",
        help="with --shards N > 1: the merge job's script instead of the array job's",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="also run the preflight (weights, shards, chat template, datasets) as submit does",
    )
    parser.add_argument("-o", "--output", type=Path, help="write the script to FILE")


def run(args: argparse.Namespace) -> int:
    from evalpipe.core.errors import ConfigError
    from evalpipe.jobs.prepare import prepare
    from evalpipe.jobs.sbatchsubmit import check
    from evalpipe.jobs.taskbudgets import budget_table
    from evalpipe.rundir.layout import RunDir, new_run_dir
    from evalpipe.rundir.sweep import run_name

    run_dir = args.out or new_run_dir(Path("results"), run_name(args.preset))
    prepared = prepare(args.preset, args.cluster, job_options(args), run_dir, results=args.results)
    if prepared.choice is not None:  # --shards/--time auto: say what was chosen and why
        print(prepared.cost_text(), end="", file=sys.stderr)
    if args.check:
        from evalpipe.jobs.sbatchsubmit import check  # the preflight's modules: only when asked for

        for warning in check(prepared).warnings:
            print(f"evalpipe render: {warning.line()}", file=sys.stderr)
    text = prepared.script
    if args.merge:
        if prepared.merge_script is None:
            raise ConfigError("--merge needs --shards N with N > 1: only arrays have a merge job.")
        text = prepared.merge_script
    if args.output:
        args.output.write_text(text, encoding="utf-8")
        print(f"evalpipe render: wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    spec = prepared.spec
    run = spec.options.run
    budgets = budget_table(
        spec.preset,
        run.selection,
        spec.plan.max_model_len,
        judge=run.judge.preset or run.judge.endpoint.base_url,
        user_sim=run.user_sim.preset or run.user_sim.endpoint.base_url,
    )
    if budgets:  # the named tasks: what each generates, in which context
        print(budgets, end="", file=sys.stderr)
    print(
        f"evalpipe render: {spec.nodes} node(s) × {spec.gpus_per_node} GPU(s), "
        f"TP={spec.plan.tensor_parallel_size} PP={spec.plan.pipeline_parallel_size}; logs go to "
        f"{RunDir(prepared.run_dir).logs}, which must exist before sbatch (`evalpipe submit` "
        "creates it)",
        file=sys.stderr,
    )
    if spec.options.shards > 1 and not args.merge:
        print(
            "evalpipe render: the dependent merge job's script: the same command with --merge",
            file=sys.stderr,
        )
    return 0
