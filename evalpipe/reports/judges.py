"""The judges of judged runs in a report: each judge's scores beside its reliability (parse
failures, the distribution of its scores, who it was), read from the judge folders' summaries."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from evalpipe.core.errors import DamagedFileError, RunDirError
from evalpipe.reports.tables import DASH, Table
from evalpipe.rundir.judgments import judge_dirs, read_judge_summary
from evalpipe.rundir.layout import RunDir


def judge_tables(run_dirs: Sequence[Path], warnings: list[str]) -> list[Table]:
    """One row per judge of each run (none when no run was judged); a judge folder whose
    summary cannot be read becomes a warning."""
    rows = []
    notes: dict[str, None] = {}
    for run_dir in run_dirs:
        for folder in judge_dirs(RunDir(run_dir)):
            try:
                summary = read_judge_summary(folder)
            except (RunDirError, DamagedFileError) as exc:
                warnings.append(str(exc))
                continue
            judge = summary["judge"]
            n, failed = summary["judgments"], summary["parse_failures"]
            rate = summary["parse_failure_rate"]
            rows.append(
                (
                    run_dir.name,
                    f"{judge.get('model')} ({judge.get('backend')}) {folder.fingerprint[:8]}",
                    str(n),
                    f"{failed} ({rate:.0%})" if rate is not None else str(failed),
                    DASH if summary["overall"] is None else f"{summary['overall']:.2f}",
                    " ".join(
                        f"{t}={DASH if v['mean'] is None else format(v['mean'], '.2f')}"
                        for t, v in summary["tasks"].items()
                    )
                    or DASH,
                    " ".join(f"{k}:{v}" for k, v in summary["distribution"].items()) or DASH,
                )
            )
            if summary.get("note"):
                notes[summary["note"]] = None
    if not rows:
        return []
    return [
        Table(
            title="Judges",
            header=("run", "judge", "judgments", "parse failures", "overall", "tasks", "scores"),
            rows=tuple(rows),
            right=(False, False, True, True, True, False, False),
            notes=(
                "Means leave parse failures out (as FastChat's MT-Bench results do); scores: "
                "how many judgments gave each score.",
                *notes,
            ),
        )
    ]
