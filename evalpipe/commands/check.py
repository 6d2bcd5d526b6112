"""`evalpipe check`: the login-node preflight alone (what `submit` runs before sbatch)."""

from __future__ import annotations

import argparse

from evalpipe.catalog.selection import Selection
from evalpipe.commands._options import add_cluster_argument
from evalpipe.core.options import add_options


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", required=True, help="preset name or path to a preset YAML")
    add_cluster_argument(parser)
    add_options(parser, Selection)


def run(args: argparse.Namespace) -> int:
    from evalpipe.catalog.clusters import load_cluster
    from evalpipe.catalog.preset import load_preset
    from evalpipe.jobs import preflight

    preset = load_preset(args.preset)
    cluster = load_cluster(args.cluster)
    if cluster.container is not None:
        from evalpipe.slurm.runtimes import find

        runtime, image = cluster.container.runtime, cluster.container.launch_image
        here = find(runtime)
        said = f"this login node has it ({here})" if here else "this login node does not have it"
        print(f"evalpipe check: cluster {cluster.name} runs jobs in {image} with {runtime}; {said}")
    report = preflight.check(
        preset,
        cluster,
        categories=args.categories,
        tasks=args.tasks,
        allow_unsafe_code=args.allow_unsafe_code,
    )
    for finding in report.warnings:
        print(f"evalpipe check: {finding.line()}")
    report.raise_for_errors()
    where = f" in {report.model_dir}" if report.model_dir else ""
    print(f"evalpipe check: {preset.name} is ready{where} ({len(report.warnings)} warning(s))")
    return 0
