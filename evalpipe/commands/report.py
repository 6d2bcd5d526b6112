"""`evalpipe report`: leaderboard, costs, plots and paired comparisons from run directories."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from evalpipe.catalog.clusters import TRACKERS
from evalpipe.core.errors import ConfigError, RunDirError

FORMATS = ("md", "csv", "json", "html", "xlsx")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="a run directory or a folder of them (searched recursively), e.g. results/",
    )
    parser.add_argument("--format", choices=FORMATS, default="md", help="output format (md)")
    parser.add_argument(
        "-o", "--output", metavar="FILE", help="write here instead of stdout (xlsx needs it)"
    )
    parser.add_argument(
        "--by",
        choices=("category", "task", "subset"),
        default="category",
        help="score columns (category); subset: the per-subset breakdown of tasks that report "
        "one, e.g. MMLU-Pro's categories (mmlu_pro/biology)",
    )
    parser.add_argument("--plots", metavar="DIR", help="also write the plots as PNG files here")
    parser.add_argument(
        "--compare",
        nargs=2,
        metavar=("RUN_A", "RUN_B"),
        help="compare two run directories per task on their shared samples (paired tests)",
    )
    parser.add_argument(
        "--resamples", type=int, default=10_000, help="paired bootstrap resamples (10000)"
    )
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (0)")
    parser.add_argument(
        "--export",
        choices=TRACKERS,
        help="log the runs to W&B or MLflow instead (configuration, metrics, samples, device "
        "series; the tracker's address and keys from its environment variables, as for run "
        "--track); a run tracked there before continues its tracked run",
    )
    parser.add_argument(
        "--alpha", type=float, default=0.05, help="significance level after Holm (0.05)"
    )


def _check(args: argparse.Namespace) -> None:
    if args.export and (args.compare or not args.paths):
        raise ConfigError(
            f"--export {args.export} logs the run directories given as PATH (no --compare): "
            "e.g. evalpipe report --export mlflow results/RUN."
        )
    if args.compare and args.paths:
        raise ConfigError(
            f"Give either PATH... ({' '.join(args.paths)}) or --compare RUN_A RUN_B, not both."
        )
    if not args.compare and not args.paths:
        raise ConfigError("Nothing to report: give a run directory or results/ folder as PATH.")
    if args.format == "xlsx" and not args.output:
        raise ConfigError("--format xlsx writes a binary workbook: add -o FILE.xlsx.")
    if args.resamples < 100:
        raise ConfigError(f"--resamples {args.resamples} is too few: use at least 100.")
    if not 0 < args.alpha < 1:
        raise ConfigError(f"--alpha {args.alpha} must lie between 0 and 1, e.g. 0.05.")


def _warn(warnings: list[str]) -> None:
    for warning in warnings:
        print(f"evalpipe report: warning: {warning}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    _check(args)
    if args.export:
        return _export(args.export, args.paths)
    # pandas and matplotlib load only here, so `evalpipe --help` and other commands stay fast.
    from evalpipe.reports import aggregate, exports, html, loading, tables
    from evalpipe.reports.bfcl import bfcl_tables
    from evalpipe.reports.compare import compare_runs
    from evalpipe.reports.judges import judge_tables
    from evalpipe.reports.ruler import ruler_tables
    from evalpipe.reports.tau2 import tau2_tables
    from evalpipe.rundir.discover import find_run_dirs

    if args.compare:
        run_dirs = [_single_run(path, find_run_dirs([path])) for path in args.compare]
        if run_dirs[0] == run_dirs[1]:
            raise ConfigError(f"RUN_A and RUN_B are the same run directory: {run_dirs[0]}.")
    else:
        run_dirs = find_run_dirs(args.paths)
    runset = loading.load_runs(run_dirs)
    warnings = list(runset.warnings)
    table = aggregate.run_table(runset)
    scores = aggregate.scores(runset, args.by)
    comparison = None
    if args.compare:
        comparison = compare_runs(
            runset.samples, table, *map(str, run_dirs),
            resamples=args.resamples, seed=args.seed, alpha=args.alpha,
        )  # fmt: skip

    images: dict[str, bytes] = {}
    if args.format == "html" or args.plots:
        from evalpipe.reports import plots  # matplotlib: only when drawing

        metrics, metric_warnings = loading.load_metrics(table.head(plots.MAX_RUNS))
        warnings += metric_warnings
        category_scores = scores if args.by == "category" else aggregate.scores(runset, "category")
        images = plots.all_plots(table, category_scores, metrics)
    judges = judge_tables(run_dirs, warnings)
    bfcl = bfcl_tables(run_dirs, warnings)
    tau2 = tau2_tables(run_dirs, warnings)
    ruler = ruler_tables(run_dirs, warnings)
    _warn(warnings)
    if args.plots:
        _write_plots(Path(args.plots), images)

    shown = tables.leaderboard(table, scores, args.by) + tables.predictions(table)
    shown += tables.occupancy(table) + tables.cut_offs(table, runset.cut_offs)
    shown += tables.refusals(table, runset.refusals)
    shown += judges + bfcl + tau2 + ruler
    if comparison is not None:
        shown += tables.comparison(comparison, args.alpha)
    if args.format == "xlsx":
        labelled = table[["run", "run_id", "preset"]].merge(scores, on="run")
        sheets = {"leaderboard": aggregate.wide(table, scores), "scores": labelled}
        if comparison is not None:
            sheets |= {"compare": comparison.tasks, "ratios": comparison.ratios}
        exports.write_xlsx(Path(args.output), sheets)
    elif args.format == "md":
        _write_text(args.output, tables.markdown(shown))
    elif args.format == "csv":
        frame = comparison.tasks if comparison is not None else aggregate.wide(table, scores)
        _write_text(args.output, exports.to_csv(frame))
    elif args.format == "json":
        _write_text(args.output, exports.to_json(table, scores, args.by, warnings, comparison))
    else:
        sources = ", ".join(args.compare or args.paths)
        page = html.page(
            title="evalpipe report",
            subtitle=f"{len(table)} run(s) from {sources}",
            tables=shown,
            images=images,
            warnings=warnings,
        )
        _write_text(args.output, page)
    return 0


def _export(tracker: str, paths: list[str]) -> int:
    """Log each run to the tracker; 1 when the tracker failed for any (it said why)."""
    import logging

    from evalpipe.run.trackdir import export_run
    from evalpipe.rundir.discover import find_run_dirs

    logging.basicConfig(format="evalpipe report: %(message)s", level=logging.WARNING)
    failed = 0
    for run_dir in find_run_dirs(paths):
        tracking = export_run(tracker, run_dir)
        failed += tracking.failed
        if tracking.tracked is not None and not tracking.failed:
            print(f"{run_dir}: {tracker} run {tracking.tracked.run_id}")
    return 1 if failed else 0


def _single_run(path: str, found: list[Path]) -> Path:
    if len(found) != 1:
        raise ConfigError(
            f"--compare needs one run directory per side, but {path!r} holds {len(found)} runs."
        )
    return found[0]


def _write_text(output: str | None, text: str) -> None:
    if output is None:
        sys.stdout.write(text)
        return
    try:
        Path(output).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise RunDirError(f"Cannot write {output!r}: {exc.strerror}.") from exc


def _write_plots(folder: Path, images: dict[str, bytes]) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name, png in images.items():
            (folder / name).write_bytes(png)
    except OSError as exc:
        raise RunDirError(f"Cannot write plots to {str(folder)!r}: {exc.strerror}.") from exc
