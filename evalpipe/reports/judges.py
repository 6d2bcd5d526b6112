"""The judges of judged runs in a report: each judge's scores beside its reliability (parse
failures, the distribution of its scores, who it was), and for pairwise tasks (Arena-Hard) the
score against the baseline with its interval and the position inconsistency, read from the
judge folders' summaries; and the figures of benchmarks that report their own (HLE, SimpleQA)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from evalpipe.core.errors import DamagedFileError, RunDirError
from evalpipe.reports.tables import DASH, Table
from evalpipe.rundir.judgments import PairwiseSummary, judge_dirs, read_judge_summary
from evalpipe.rundir.layout import RunDir
from evalpipe.tasks.benchmetrics import benchmark_metrics


def judge_tables(run_dirs: Sequence[Path], warnings: list[str]) -> list[Table]:
    """One row per judge of each run (none when no run was judged); a judge folder whose
    summary cannot be read becomes a warning."""
    rows = []
    pairwise = []
    benchmarks = []
    notes: dict[str, None] = {}
    for run_dir in run_dirs:
        for folder in judge_dirs(RunDir(run_dir)):
            try:
                summary = read_judge_summary(folder)
            except (RunDirError, DamagedFileError) as exc:
                warnings.append(str(exc))
                continue
            judge = summary.judge
            who = f"{judge.model} ({judge.backend}) {folder.fingerprint[:8]}"
            for task, pair in summary.pairwise.items():
                pairwise.append((run_dir.name, who, task, str(pair.baseline), *_pair(pair)))
            for task, figures in summary.benchmarks.items():
                metrics = benchmark_metrics(judge.gradings.get(task, {}).get("kind"))
                if metrics is not None:
                    benchmarks.append((run_dir.name, who, task, metrics.describe(figures)))
            n, failed = summary.judgments, summary.parse_failures
            rate = summary.parse_failure_rate
            cut = summary.cut_off_in_reasoning
            rows.append(
                (
                    run_dir.name,
                    who,
                    str(n),
                    (f"{failed} ({rate:.0%})" if rate is not None else str(failed))
                    + (f", {cut} cut off" if cut else "")
                    + "".join(f", {k} {reason}" for reason, k in summary.refused.items()),
                    DASH if summary.overall is None else f"{summary.overall:.2f}",
                    str(summary.out_of_range),
                    " ".join(
                        f"{t}={DASH if v.mean is None else format(v.mean, '.2f')}"
                        for t, v in summary.tasks.items()
                    )
                    or DASH,
                    " ".join(f"{k}:{v}" for k, v in summary.distribution.items()) or DASH,
                )
            )
            if summary.note:
                notes[summary.note] = None
    if not rows:
        return []
    tables = [
        Table(
            title="Judges",
            header=(
                "run",
                "judge",
                "judgments",
                "parse failures",
                "overall",
                "out of range",
                "tasks",
                "scores",
            ),
            rows=tuple(rows),
            right=(False, False, True, True, True, True, False, False),
            notes=(
                "Means leave parse failures out (as FastChat's MT-Bench results do); scores: "
                "how many judgments gave each score.",
                "Cut off: parse failures of a reasoning judge that stopped inside its reasoning "
                "(a verdict is read from its answer only). Out of range: ratings outside the "
                "scale the judge was asked for (MT-Bench: 1-10), kept in the means as "
                "FastChat keeps them.",
                *notes,
            ),
        )
    ]
    if pairwise:
        tables.append(
            Table(
                title="Pairwise judges",
                header=(
                    "run",
                    "judge",
                    "task",
                    "baseline",
                    "pairs",
                    "score % (CI)",
                    "win rate %",
                    "position inconsistency",
                ),
                rows=tuple(pairwise),
                right=(False, False, False, False, True, True, True, True),
                notes=(
                    "Score and 90 % interval as arena-hard-auto's show_result.py computes them "
                    "(100 bootstrap rounds, strong verdicts weighing three battles); win rate: "
                    "all battles, no resampling; pairs: questions judged in both orders, with a "
                    "verdict in each. Position inconsistency: pairs whose two orders give the "
                    "model different results (MT-Bench paper's definition).",
                ),
            )
        )
    if benchmarks:
        tables.append(
            Table(
                title="Judged benchmarks",
                header=("run", "judge", "task", "figures"),
                rows=tuple(benchmarks),
                right=(False, False, False, False),
                notes=(
                    "Each benchmark's own figures (docs/judge.md): HLE's accuracy with its Wald "
                    "95 % half width and calibration error as HLE's repository computes them "
                    "(nvidia-hle's beside it where they differ); SimpleQA's F-score and accuracy "
                    "given attempted as simple-evals computes them.",
                ),
            )
        )
    return tables


def _pair(pair: PairwiseSummary) -> tuple[str, str, str, str]:
    position, arena = pair.position, pair.arena
    rate = position.rate
    if arena is None:
        score = win = DASH
    else:
        score = (
            f"{100 * arena.score:.1f} (-{100 * (arena.score - arena.lower):.1f} / "
            f"+{100 * (arena.upper - arena.score):.1f})"
        )
        win = f"{100 * arena.win_rate:.1f}"
    inconsistent = f"{position.inconsistent}/{position.pairs}" + (
        "" if rate is None else f" ({rate:.0%})"
    )
    return f"{pair.pairs_scored}/{pair.pairs}", score, win, inconsistent
