"""`evalpipe submit`: plan, render, validate and submit one job per preset; optionally wait."""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
from pathlib import Path

from evalpipe.commands._options import add_job_arguments, job_options
from evalpipe.core.options import names, seconds
from evalpipe.jobs.executors import EXECUTORS
from evalpipe.jobs.jobspec import JobOptions
from evalpipe.rundir.layout import RunDir


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--preset",
        required=True,
        action="append",
        type=names,
        help="preset name or YAML path; repeat it or give a comma list for a sweep",
    )
    add_job_arguments(parser)
    parser.add_argument(
        "--out",
        type=Path,
        help="run directory (a sweep directory for several presets); an existing run resumes "
        "(default: results/<preset>-<time>-<hex>, or results/sweep-<time>-<hex>)",
    )
    parser.add_argument(
        "--after-pilot",
        type=Path,
        metavar="RUN",
        help="submit the full run after the finished pilot in RUN: into RUN (its samples "
        "resumed, not generated again), sized by --shards auto --time auto from the pilot's "
        "lengths and rates (docs/planner.md, Pilot)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the script(s) and the exact sbatch command lines; submit nothing",
    )
    parser.add_argument(
        "--wait", action="store_true", help="block until the jobs end; exit 1 if any failed"
    )
    parser.add_argument(
        "--poll", type=seconds, default=5.0, help="seconds between state checks with --wait"
    )
    parser.add_argument(
        "--no-check",
        action="store_true",
        help="skip the preflight (weights, shards, chat template, datasets); "
        "submission.json records that it was skipped",
    )
    parser.add_argument(
        "--executor",
        choices=EXECUTORS,
        default="sbatch",
        help="submit evalpipe's script with sbatch, or through submitit's SlurmExecutor",
    )


def _print_dry_run(prepared: list) -> None:
    from evalpipe.slurm.argv import sbatch_argv

    for p in prepared:
        print(f"==> {RunDir(p.run_dir).job_script} (not written) <==")
        sys.stdout.write(p.script)
        if p.merge_script is not None:
            print(f"==> {RunDir(p.run_dir).merge_script} (not written) <==")
            sys.stdout.write(p.merge_script)
        print("==> sbatch command lines (nothing submitted) <==")
        for script in p.test_only_scripts():
            print(shlex.join(sbatch_argv(script, test_only=True)))
        for argv in p.argv():
            print(shlex.join(argv))


def _after_pilot(args: argparse.Namespace, options: JobOptions) -> JobOptions:
    """The full run's options after a pilot: its own run directory, and shards and time limit
    from the pilot's figures unless given (--shards N > 1, --time)."""
    from evalpipe.core.errors import ConfigError

    if args.out is not None and args.out.resolve() != args.after_pilot.resolve():
        raise ConfigError(
            f"--after-pilot {args.after_pilot} continues the pilot's own run directory, not "
            f"--out {args.out}: drop --out (the pilot's samples are resumed there)."
        )
    if options.run.selection.pilot is not None:
        raise ConfigError(
            f"--after-pilot submits the full run; --pilot {options.run.selection.pilot} would "
            "draw another pilot. Drop --pilot."
        )
    # 1 is --shards' default: left alone, the pilot's figures choose.
    return dataclasses.replace(
        options,
        shards="auto" if options.shards == 1 else options.shards,
        time=options.time or "auto",
    )


def run(args: argparse.Namespace) -> int:
    from evalpipe.estimate.predict import DEFAULT_RESULTS
    from evalpipe.jobs.jobstatus import JobStatus
    from evalpipe.jobs.sbatchsubmit import check, default_out, prepare_all, submit_all

    presets = [p for group in args.preset for p in group]
    sweep = len(presets) > 1
    options = job_options(args)
    if args.after_pilot is not None:
        options = _after_pilot(args, options)
    out = args.after_pilot or args.out or default_out(presets)
    results = args.results or [DEFAULT_RESULTS]
    prepared = prepare_all(
        presets, args.cluster, options, out, results=results, pilot=args.after_pilot
    )
    if args.dry_run:
        # The cost first: it needs neither the weights nor the data the preflight looks for.
        for p in prepared:
            print(f"==> {p.spec.preset.name}: predicted cost (nothing submitted) <==")
            sys.stdout.write(p.cost_text())
        sys.stdout.flush()
        if not args.no_check:
            for p in prepared:
                check(p)
        _print_dry_run(prepared)
        return 0
    for p in prepared:  # the cost and the reasoning behind any choice, before anything is sent
        print(f"{p.spec.preset.name}: " + p.cost_text(), end="", file=sys.stderr)
    jobs = submit_all(
        prepared,
        sweep_dir=out if sweep else None,
        executor=args.executor,
        run_checks=not args.no_check,
    )
    for p, job in zip(prepared, jobs, strict=True):
        merge = f" (merge job {job.merge_job_id})" if job.merge_job_id else ""
        print(f"{p.spec.preset.name}: job {job.job_id}{merge} → {job.run_dir}")
    if sweep:
        print(f"sweep recorded in {out / 'sweep.json'}")
    if not args.wait:
        return 0

    tty = sys.stderr.isatty()
    failed = 0
    for job in jobs:
        shown = [""]

        def progress(status: JobStatus, job_id: str = job.job_id, shown: list = shown) -> None:
            line = f"job {job_id}: {status.line()}"
            if line != shown[0]:
                print(("\r" if tty else "") + line, end="" if tty else "\n", file=sys.stderr)
                shown[0] = line

        status = job.wait(poll_s=args.poll, on_progress=progress)
        if tty:
            print(file=sys.stderr)
        if status.ok:
            print(f"job {job.job_id} completed; results in {job.run_dir}")
            continue
        failed += 1
        bad = [f"{t.job_id} {t.state}" for t in status.all if t.state != "COMPLETED"]
        print(
            f"evalpipe submit: job {job.job_id} did not complete ({', '.join(bad)}); "
            f"logs: {RunDir(job.run_dir).logs}",
            file=sys.stderr,
        )
    return 1 if failed else 0
