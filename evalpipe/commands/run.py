"""`evalpipe run`: evaluate a preset on tasks into a run directory, resumably."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from evalpipe.catalog.selection import SELECTION
from evalpipe.core.options import add_options, from_args
from evalpipe.run.runoptions import (
    ENDPOINT,
    ENGINE,
    EXECUTOR,
    GENERATION,
    JUDGE,
    LAYOUT,
    RUNTIME,
    SHARD,
    TRACKING,
    USER_SIM,
    RunnerOptions,
)

if TYPE_CHECKING:  # the session loads the tasks and the engine: only when a run starts
    from evalpipe.run.session import RunResult


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--preset",
        required=True,
        action="append",
        help="preset name or path to a preset YAML; several (a,b,c or repeated) run a sweep",
    )
    add_options(parser, RunnerOptions, groups=(SELECTION, SHARD))
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
        groups=(ENGINE, GENERATION, LAYOUT, EXECUTOR, RUNTIME, TRACKING),
        help_values={"layout": "planned from the visible GPUs; the preset's or 1 on a CPU"},
    )
    endpoint = parser.add_argument_group(
        "endpoint (--backend openai: a model behind an OpenAI-compatible server; docs/engine.md)"
    )
    add_options(endpoint, RunnerOptions, groups=(ENDPOINT,))
    judge = parser.add_argument_group(
        "judge (judged tasks: the kinds `evalpipe tasks list` says need a judge; docs/judge.md)"
    )
    add_options(judge, RunnerOptions, groups=(JUDGE,))
    user_sim = parser.add_argument_group(
        "user simulator (agent tasks: the model playing the user of each episode; docs/agents.md)"
    )
    add_options(user_sim, RunnerOptions, groups=(USER_SIM,))


def runner_options(args: argparse.Namespace) -> RunnerOptions:
    """The record a job's argv (JobSpec.runner_options) parses back to."""
    return from_args(RunnerOptions, args)


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


def _print(result: RunResult) -> None:
    from evalpipe.rundir.judgments import format_judge_summary, read_judge_summary
    from evalpipe.rundir.summarytext import format_summary

    if result.phases_apart:  # each phase's process printed its own
        return
    if result.judged is not None:
        print(format_judge_summary(read_judge_summary(result.judged)))
        print(f"\nJudgments: {result.judged.path}")
        return
    if result.summary is not None:
        print(format_summary(result.summary))
    print(f"\nRun directory: {result.run_dir}")
    if result.status == "interrupted":
        done = result.summary.n_done if result.summary else 0
        print(
            f"evalpipe run: interrupted with {done} samples done; rerun the same command with "
            f"--out {shlex.quote(str(result.run_dir))} to resume.",
            file=sys.stderr,
        )


def run(args: argparse.Namespace) -> int:
    from evalpipe.run.session import run_session, sweep
    from evalpipe.rundir.sweep import default_folder, preset_list

    given = runner_options(args)  # checked before a sweep starts its first run
    presets = preset_list(args.preset)
    if len(presets) > 1:
        return sweep(
            presets,
            given,
            args.out or default_folder(presets),
            on_result=_print,
            leaderboard=_leaderboard,
            resume=args.resume,
        )
    result = run_session(presets[0], given, out=args.out, resume=args.resume)
    _print(result)
    if given.selection.pilot is not None and result.status == "complete":
        _pilot_estimate(presets[0], given, result.run_dir)
    return result.exit_status


def _pilot_estimate(preset: str, given: RunnerOptions, run_dir: Path) -> None:
    """The full run's estimate from the pilot just finished, and the command that submits it;
    a pilot whose figures cannot be estimated from says why and keeps its exit status."""
    from evalpipe.catalog.preset import load_preset
    from evalpipe.core.errors import EvalpipeError
    from evalpipe.estimate.pilot import after_pilot_command, pilot_estimate

    if given.engine.backend != "vllm":
        print(
            f"evalpipe run: no estimate from this pilot: the {given.engine.backend} engine's "
            "timings and answer lengths say nothing of a model's; pilot with --backend vllm.",
            file=sys.stderr,
        )
        return
    try:
        # Smoke records beside the run (results/, as `evalpipe smoke --out` writes them there).
        found = pilot_estimate(load_preset(preset), given.selection, run_dir, [run_dir.parent])
    except EvalpipeError as exc:
        print(f"evalpipe run: no estimate from this pilot: {exc}", file=sys.stderr)
        return
    print("\n" + found.describe(after_pilot_command(preset, given.selection, run_dir)), end="")
