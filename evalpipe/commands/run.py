"""`evalpipe run`: evaluate a preset on tasks into a run directory, resumably."""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import sys
from pathlib import Path

from evalpipe.commands._options import seconds
from evalpipe.core.options import add_options, from_args, positive_int
from evalpipe.run.options import (
    ENDPOINT,
    ENGINE,
    EXECUTOR,
    JUDGE,
    LAYOUT,
    SELECTION,
    TRACKING,
    WATCHDOG,
    RunnerOptions,
)


def _shard(text: str) -> object:
    from evalpipe.core.errors import ConfigError
    from evalpipe.rundir.shard import Shard

    try:
        return Shard.parse(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--preset",
        required=True,
        action="append",
        help="preset name or path to a preset YAML; several (a,b,c or repeated) run a sweep",
    )
    add_options(parser, RunnerOptions, groups=(SELECTION,))
    parser.add_argument(
        "--shard", type=_shard, help="run slice i of N (every N-th sample, from the i-th)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="run directory; an existing one is resumed "
        "(default: results/<preset>-<UTC time>-<4 hex>)",
    )
    parser.add_argument(
        "--resume", action="store_true", help="require --out to be an existing run and resume it"
    )
    add_options(
        parser,
        RunnerOptions,
        groups=(ENGINE, LAYOUT, EXECUTOR),
        help_values={"layout": "planned from the visible GPUs; the preset's or 1 on a CPU"},
    )
    parser.add_argument(
        "--monitor-interval",
        type=seconds,
        default=1.0,
        help="seconds between GPU/CPU samples (default 1)",
    )
    parser.add_argument(
        "--no-oom-fallback",
        action="store_true",
        help="fail on out-of-memory instead of stepping down engine settings",
    )
    parser.add_argument(
        "--deterministic",
        action="store_true",
        help="fixed request order, window and seeds on one engine; batch-invariant kernels "
        "where vLLM has them on this platform (docs/runner.md)",
    )
    parser.add_argument(
        "--window",
        type=positive_int,
        help="requests kept in flight per engine replica (default: twice vLLM's max_num_seqs)",
    )
    add_options(parser, RunnerOptions, groups=(WATCHDOG, TRACKING))
    endpoint = parser.add_argument_group(
        "endpoint (--backend openai: a model behind an OpenAI-compatible server; docs/engine.md)"
    )
    add_options(endpoint, RunnerOptions, groups=(ENDPOINT,))
    judge = parser.add_argument_group(
        "judge (judged tasks: the kinds `evalpipe tasks list` says need a judge; docs/judge.md)"
    )
    add_options(judge, RunnerOptions, groups=(JUDGE,))


def runner_options(args: argparse.Namespace) -> RunnerOptions:
    """The record a job's argv (JobSpec.runner_options) parses back to."""
    return from_args(RunnerOptions, args)


def _endpoint_preset(options: RunnerOptions, preset):
    """The preset with the command line's endpoint options applied (--backend openai only)."""
    from evalpipe.catalog.preset import with_endpoint

    if options.backend != "openai":  # the record refuses endpoint options then
        return preset
    return with_endpoint(
        preset,
        base_url=options.base_url,
        model=options.model,
        api_key_env=options.api_key_env,
        concurrency=options.concurrency,
    )


def _tracker(name: str | None):
    """The tracking phase's factory for --track NAME (None: the run is not tracked)."""
    if name is None:
        return None
    from evalpipe.run.trackers import BACKENDS
    from evalpipe.run.tracking import Tracking, exit_wait_s
    from evalpipe.rundir.layout import RunDir
    from evalpipe.rundir.tracked import tracking_group

    wait_s = exit_wait_s()
    return lambda out, previous: Tracking(
        BACKENDS[name],
        out,
        tracker=name,
        group=tracking_group(RunDir(out)),
        previous=previous,
        exit_wait_s=wait_s,
    )


def _log_to_stderr() -> None:
    """Show evalpipe's own notes (monitor: NVML missing, devices watched) in the job log."""
    logger = logging.getLogger("evalpipe")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("evalpipe run: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


def _sweep(args: argparse.Namespace, presets: list[str]) -> int:
    """Several presets: one run directory each under one sweep folder (evalpipe/rundir/sweep.py)."""
    from evalpipe.core.errors import ConfigError
    from evalpipe.rundir.sweep import default_folder, run_sweep

    if args.shard is not None or args.resume:
        raise ConfigError(
            "--shard and --resume take one preset; a sweep resumes by rerunning the same command."
        )
    return run_sweep(
        presets,
        args.out or default_folder(presets),
        lambda preset, out: run(
            argparse.Namespace(**{**vars(args), "preset": [preset], "out": out})
        ),
        leaderboard=_leaderboard,
    )


def _leaderboard(folder: Path) -> int:
    """`evalpipe report FOLDER` after a sweep; its error is reported as that command's."""
    from evalpipe.commands import report
    from evalpipe.core.errors import EvalpipeError

    parser = argparse.ArgumentParser(prog="evalpipe report")
    report.add_arguments(parser)
    try:
        return report.run(parser.parse_args([str(folder)]))
    except EvalpipeError as exc:
        print(f"evalpipe report: error: {exc}", file=sys.stderr)
        return exc.exit_status


def run(args: argparse.Namespace) -> int:
    from evalpipe.rundir.sweep import preset_list

    given = runner_options(args)  # checked before a sweep starts its first run
    presets = preset_list(args.preset)
    if len(presets) > 1:
        return _sweep(args, presets)
    args.preset = presets[0]
    from evalpipe.catalog.models import find_model
    from evalpipe.catalog.preset import load_preset
    from evalpipe.catalog.taskrefs import names_judged
    from evalpipe.core.errors import ConfigError
    from evalpipe.engine.base import EngineSettings
    from evalpipe.engine.factory import open_engine
    from evalpipe.estimate.lengths import load_lengths
    from evalpipe.monitor import Monitor
    from evalpipe.run.judging import read_baseline
    from evalpipe.run.localplan import plan_local
    from evalpipe.run.replicas import ReplicaPool
    from evalpipe.run.runner import RunOptions, run_evaluation
    from evalpipe.run.watchdog import Watchdog, stall_limits
    from evalpipe.rundir.checkpoint import StopOnSignal
    from evalpipe.rundir.layout import MANIFEST, RunDir
    from evalpipe.rundir.results import new_run_dir
    from evalpipe.rundir.summarytext import format_summary
    from evalpipe.tasks.kind import LoadOptions
    from evalpipe.tasks.kinds import load_selection

    # Handle the stop signals from the start: one that arrives while tasks and the model load
    # must still end in a checkpoint and exit 75, not kill the process.
    with StopOnSignal() as stop:
        preset = _endpoint_preset(given, load_preset(args.preset))
        if args.resume and args.out is None:
            raise ConfigError("--resume needs --out DIR naming the run directory to resume.")
        if args.resume and not (args.out / MANIFEST).is_file():
            raise ConfigError(
                f"--resume: {args.out} holds no {MANIFEST}, so there is no run to resume. "
                "Drop --resume to start a new run there."
            )
        categories = given.categories or (None if given.tasks else preset.categories)
        placement = _placement(given, names_judged(given.tasks or ()))
        if placement == "after":
            out = args.out or new_run_dir(Path("results"), preset.name)
            return _phases_apart(args, given, out, stop)
        selection = load_selection(
            given.tasks,
            LoadOptions(
                preset=preset,
                backend=given.backend,
                categories=tuple(categories) if categories else None,
                mc_method=given.mc_method,
                since=given.since,
                until=given.until,
                judge_data=Path(given.judge_data) if given.judge_data else None,
                baseline=read_baseline(Path(given.judge_baseline))
                if given.judge_baseline
                else None,
            ),
            max_tokens=given.max_tokens,
            max_model_len=given.max_model_len,
            generation_model=find_model(preset),
        )
        tasks, context = list(selection.tasks), selection.context
        judge_beside = placement == "side-by-side"
        judge_gpus = _split_gpus(given) if judge_beside and given.backend == "vllm" else None
        layout = plan_local(
            preset,
            tp=given.tp,
            pp=given.pp,
            # A deterministic run is one engine unless asked otherwise (then refused, saying why).
            replicas=given.replicas or (1 if args.deterministic else None),
            max_model_len=context.max_model_len,
            # Neither the fake engine nor a remote server uses this machine's GPUs.
            gpus=[] if given.backend in ("fake", "openai") else None,
        )
        settings = EngineSettings(
            tensor_parallel_size=layout.tp,
            pipeline_parallel_size=layout.pp,
            max_model_len=context.max_model_len,
            distributed_executor_backend=given.distributed_executor_backend,
            oom_fallback=not args.no_oom_fallback,
            deterministic=args.deterministic,
        )
        options = RunOptions(
            backend=given.backend,
            engine=settings,
            categories=categories,
            limit=given.limit,
            shard=args.shard,
            replicas=layout.replicas,
            window=args.window,
            deterministic=args.deterministic,
            admission=given.admission,
        )
        out = args.out or new_run_dir(Path("results"), preset.name)
        # Past runs in results/ and beside this one (not the whole working directory) predict
        # its completion lengths.
        beside = [] if out.parent.resolve() == Path.cwd().resolve() else [out.parent]
        past = (
            load_lengths([Path("results"), *beside], exclude=out)
            if given.admission != "given"
            else []
        )
        _log_to_stderr()
        print(f"evalpipe run: run directory {out}", file=sys.stderr, flush=True)
        where = (
            f"the server at {preset.endpoint.base_url}, {preset.endpoint.concurrency} requests "
            "in flight"
            if given.backend == "openai"
            else f"TP={layout.tp} × PP={layout.pp}, {layout.replicas} replica(s) on "
            f"{layout.device}" + "".join(f"\n  note: {n}" for n in layout.notes)
        )
        print(f"evalpipe run: {where}", file=sys.stderr, flush=True)
        for note in selection.notes:
            print(f"evalpipe run: {note}", file=sys.stderr, flush=True)

        def start(settings: EngineSettings):
            if not layout.envs:  # one replica: the engine runs in this process
                return open_engine(given.backend, preset, settings)
            return ReplicaPool.start(given.backend, preset, settings, layout.envs)

        if given.phase == "judge":
            return _judge(given, preset, selection, tasks, options, out, stop)
        limits = stall_limits(preset, given.stall_timeout)
        # In a multi-node job (vLLM over Ray, or a server whose Ray workers run there) the
        # other nodes' monitors follow this one's phase and clock, and its summary adds their
        # devices. A Ray run outside SLURM publishes too: a hand-started follower can use it.
        nodes = os.environ.get("SLURM_JOB_NUM_NODES", "1")
        spans_nodes = given.distributed_executor_backend == "ray" or (
            nodes.isdigit() and int(nodes) > 1
        )
        judging = _judge_beside(args, given, out, judge_gpus) if judge_beside else None
        try:
            result = run_evaluation(
                start,
                tasks,
                out,
                preset=preset,
                options=options,
                stop=stop,
                monitor=lambda csv: Monitor(
                    csv,
                    interval_s=args.monitor_interval,
                    publish_phase=RunDir(out).phase_file if spans_nodes else None,
                    node_csvs=RunDir(out).node_metrics_files,
                ).start(),
                watchdog=(lambda on_stall: Watchdog(limits, on_stall).start()) if limits else None,
                tracker=_tracker(given.track),
                past=past,
            )
        except BaseException:
            if judging is not None:  # the judge checkpoints what it has
                judging.finish(lambda: "SIGTERM")
            raise
        print(format_summary(result.summary))
        print(f"\nRun directory: {out}")
        if result.status != "complete":
            print(
                f"evalpipe run: interrupted with {result.n_done}/{result.n_total} samples done; "
                "rerun the same command with "
                f"--out {shlex.quote(str(out))} to resume.",
                file=sys.stderr,
            )
        if judging is not None:  # within the stop handler: a stop while it judges is passed on
            judge_status = judging.finish(lambda: stop.requested)
            return result.exit_status if result.status != "complete" else judge_status
    return result.exit_status


def _judging(given: RunnerOptions) -> bool:
    return given.judge is not None or given.judge_base_url is not None


def _placement(given: RunnerOptions, judged_tasks: bool) -> str | None:
    """Where this command's judge runs: "after" generation (each phase a process of its own)
    or "side-by-side"; None when it runs one phase, or judges nothing."""
    if not judged_tasks or not _judging(given) or given.phase is not None:
        return None
    return "side-by-side" if given.judge_placement == "side-by-side" else "after"


def _phase_command(
    args: argparse.Namespace, given: RunnerOptions, out: Path, phase: str
) -> list[str]:
    """This command again for one phase of a judged run, with this one's options."""
    import dataclasses

    from evalpipe.core.options import to_argv

    options = to_argv(dataclasses.replace(given, phase=phase))
    argv = [word for pair in options for word in pair]
    argv += ["--monitor-interval", repr(args.monitor_interval)]
    if args.shard is not None:
        argv += ["--shard", f"{args.shard.index}/{args.shard.count}"]
    if args.window is not None:
        argv += ["--window", str(args.window)]
    argv += [flag for flag, on in (("--no-oom-fallback", args.no_oom_fallback),
                                   ("--deterministic", args.deterministic)) if on]  # fmt: skip
    return [sys.executable, "-m", "evalpipe", "run", "--preset", args.preset, *argv, "--out",
            str(out)]  # fmt: skip


def _phases_apart(args: argparse.Namespace, given: RunnerOptions, out: Path, stop) -> int:
    """The judge after generation: each phase in a process of its own, the generation's gone
    (and its memory with it) before the judge's starts. A stop signal is passed on."""
    import subprocess

    from evalpipe.core import exitcodes
    from evalpipe.run.placement import wait_child

    def requested() -> str | None:
        return stop.requested

    print("evalpipe run: generating, then judging, each phase in a process of its own",
          file=sys.stderr, flush=True)  # fmt: skip
    generate = subprocess.Popen(_phase_command(args, given, out, "generate"))
    status = wait_child(generate, requested)
    if status != exitcodes.OK or stop.requested is not None:
        return status if status != exitcodes.OK else exitcodes.RESUMABLE
    print("evalpipe run: judging the answers in a new process", file=sys.stderr, flush=True)
    return wait_child(subprocess.Popen(_phase_command(args, given, out, "judge")), requested)


def _judge_beside(
    args: argparse.Namespace, given: RunnerOptions, out: Path, gpus: list[str] | None
):
    """The judge's process, started with the generation (on `gpus`, its CUDA_VISIBLE_DEVICES
    entries, on a GPU node)."""
    from evalpipe.run.placement import JudgeBeside

    print("evalpipe run: judging answers side by side as they are written", file=sys.stderr,
          flush=True)  # fmt: skip
    return JudgeBeside(_phase_command(args, given, out, "judge"), gpus=gpus)


def _split_gpus(given: RunnerOptions) -> list[str] | None:
    """Side by side on GPUs: this process keeps the model's share of the visible GPUs (its
    CUDA_VISIBLE_DEVICES narrowed before anything plans or loads); the judge's share comes
    back (None without GPUs: both processes share the CPU engine's cores)."""
    from evalpipe.catalog.preset import load_preset
    from evalpipe.run.localplan import visible_gpus
    from evalpipe.run.placement import beside_gpus

    gpus = visible_gpus()
    if not gpus:
        return None
    judge = load_preset(given.judge) if given.judge and given.judge_base_url is None else None
    model, judge_gpus = beside_gpus(gpus, judge, tp=given.tp, pp=given.pp, replicas=given.replicas)
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(model)
    return judge_gpus


def _judge(given: RunnerOptions, preset, judged, tasks, options, out: Path, stop) -> int:
    """--phase judge: judge the answers stored in `out` (generating nothing)."""
    from evalpipe.core import exitcodes
    from evalpipe.core.errors import ConfigError
    from evalpipe.run.judging import judge_for, judge_run
    from evalpipe.run.runner import select_samples
    from evalpipe.rundir.judgments import format_judge_summary

    if not judged.gradings or not _judging(given):
        raise ConfigError(
            "--phase judge needs a judge (--judge PRESET or --judge-base-url URL) and judged "
            "tasks (`evalpipe tasks list` shows the kinds that need a judge)."
        )
    from evalpipe.run.placement import generation_open

    judge, start = judge_for(given, preset, judged.gradings, judged.published)
    work = [(t, select_samples(t, options)) for t in tasks if t.name in judged.gradings]
    tracking = None
    if given.track is not None:
        from evalpipe.run.trackdir import end_judging, track_judging

        # The run's tracked run gains the judge's figures (at most the tracker's usual wait).
        tracking = track_judging(given.track, out, judge.definition())
    # Side by side, the generating process holds this one's standard input until it ends.
    generating = generation_open() if given.judge_placement == "side-by-side" else None
    result = judge_run(
        start, out, work, judge, stopping=lambda: stop.requested is not None, generating=generating
    )
    print(format_judge_summary(result.summary))
    print(f"\nJudgments: {result.folder.path}")
    if tracking is not None:
        end_judging(tracking, result)
    return exitcodes.OK if result.status == "complete" else exitcodes.RESUMABLE
