"""`evalpipe smoke`: a short job on the real layout that loads the model, answers two prompts,
and records memory, KV capacity, throughput and start-up phases beside the planner's figures."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from evalpipe.core.options import add_options, from_args, positive_int, seconds
from evalpipe.run.runoptions import ENGINE, EXECUTOR, LAYOUT, RunnerOptions


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", required=True, help="preset name or path to a preset YAML")
    parser.add_argument(
        "--cluster", help="cluster profile: submit the smoke job there (not with --local)"
    )
    parser.add_argument(
        "--local",
        action="store_true",
        help="run here, in this process (what the smoke job itself runs)",
    )
    add_options(
        parser, RunnerOptions, groups=(ENGINE, LAYOUT, EXECUTOR), help_values={"layout": "planned"}
    )
    parser.add_argument("--gpu", help="with --local: the GPU to plan for (default: the cluster's)")
    parser.add_argument(
        "--gpus-per-node",
        type=positive_int,
        help="with --local: GPUs per node to plan for (default: the cluster's)",
    )
    parser.add_argument("--out", type=Path, help="run directory (default: results/smoke-…)")
    parser.add_argument("--no-check", action="store_true", help="skip the preflight")
    parser.add_argument("--wait", action="store_true", help="wait for the job; print its table")
    parser.add_argument("--poll", type=seconds, default=5.0, help="seconds between state checks")


def run(args: argparse.Namespace) -> int:
    from evalpipe.core.errors import ConfigError
    from evalpipe.rundir.layout import new_run_dir
    from evalpipe.rundir.sweep import run_name

    out = args.out or new_run_dir(Path("results"), f"smoke-{run_name(args.preset)}")
    if args.local:
        return _local(args, out)
    if args.cluster is None:
        raise ConfigError("evalpipe smoke needs --cluster C (submit a job) or --local (run here).")
    return _submit(args, out)


def _local(args: argparse.Namespace, out: Path) -> int:
    from evalpipe.catalog import weights
    from evalpipe.catalog.clusters import load_cluster
    from evalpipe.catalog.gpus import get_gpu
    from evalpipe.catalog.preset import load_preset
    from evalpipe.core.errors import ConfigError
    from evalpipe.engine.protocol import EngineSettings
    from evalpipe.estimate.calibration import table
    from evalpipe.planning import planner
    from evalpipe.run.smokeprobe import run_smoke

    if args.cluster is None and args.gpu is None:
        raise ConfigError("evalpipe smoke --local needs --gpu NAME or --cluster C to plan for.")
    cluster = load_cluster(args.cluster) if args.cluster else None
    gpu = get_gpu(args.gpu or cluster.gpu)  # type: ignore[union-attr]
    preset = load_preset(args.preset)
    plan = planner.plan(
        preset,
        gpu,
        gpus_per_node=args.gpus_per_node or (cluster.gpus_per_node if cluster else 8),
        tp=args.tp,
        pp=args.pp,
        max_model_len=args.max_model_len,
        overhead_correction_gib=cluster.overhead_correction_gib if cluster else 0.0,
    )
    settings = EngineSettings(
        tensor_parallel_size=plan.tensor_parallel_size,
        pipeline_parallel_size=plan.pipeline_parallel_size,
        max_model_len=plan.max_model_len,
        distributed_executor_backend=args.distributed_executor_backend,
    )
    calibration = run_smoke(preset, plan, backend=args.backend, out=out, settings=settings)
    # The cluster's cache_dir reaches the job as EVALPIPE_CACHE: the shared copy goes there.
    shared = weights.cache_dir() if "EVALPIPE_CACHE" in os.environ else None
    for path in calibration.write(out, shared):
        print(f"evalpipe smoke: calibration written to {path}", file=sys.stderr)
    sys.stdout.write(table(calibration))
    return 0


def _submit(args: argparse.Namespace, out: Path) -> int:
    from evalpipe.estimate.calibration import load_calibrations, table
    from evalpipe.jobs.jobspec import SMOKE_RUNNER_GROUPS, JobOptions
    from evalpipe.jobs.prepare import prepare
    from evalpipe.jobs.sbatchsubmit import submit_prepared

    # One engine is what smoke measures.
    run = from_args(RunnerOptions, args, groups=SMOKE_RUNNER_GROUPS, replicas=1)
    options = JobOptions(run=run, smoke=True)
    prepared = prepare(args.preset, args.cluster, options, out)
    job = submit_prepared(prepared, run_checks=not args.no_check)
    print(f"{prepared.spec.preset.name}: smoke job {job.job_id} → {job.run_dir}")
    if not args.wait:
        return 0
    status = job.wait(poll_s=args.poll)
    if not status.ok:
        print(
            f"evalpipe smoke: job {job.job_id} did not complete ({status.line()}); "
            f"logs: {job.run_dir / 'logs'}",
            file=sys.stderr,
        )
        return 1
    for calibration in load_calibrations([job.run_dir]):
        sys.stdout.write(table(calibration))
    return 0
