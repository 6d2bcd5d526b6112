"""BFCL in a report: one row per run that ran BFCL, its groups and overall as BFCL's leaderboard
computes them (from each run's bfcl_results.json), best overall first, with the mode it ran in
and whether its overall counts categories the run did not run."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from evalpipe.core.errors import DamagedFileError, RunDirError
from evalpipe.reports.tables import Table
from evalpipe.rundir.kindresults import read_kind_results
from evalpipe.rundir.layout import RunDir
from evalpipe.tasks.bfcl.results import BfclSummary

KIND = "bfcl"
# BFCL's leaderboard columns (its groups), in its order; relevance is shown, outside the overall.
COLUMNS = {"non_live": "non-live", "live": "live", "irrelevance_detection": "irrelevance",
           "multi_turn": "multi-turn", "agentic": "agentic",
           "relevance_detection": "relevance"}  # fmt: skip
PARTIAL = "§"  # not "*": markdown would read two as emphasis


def bfcl_tables(run_dirs: Sequence[Path], warnings: list[str]) -> list[Table]:
    """The BFCL table (none when no run ran BFCL); a document that cannot be read becomes a
    warning."""
    found: list[tuple[str, BfclSummary]] = []
    for run_dir in run_dirs:
        files = RunDir(run_dir)
        try:
            document = read_kind_results(files, KIND)
            if document is not None:
                found.append(
                    (run_dir.name, BfclSummary.from_dict(document, files.kind_results(KIND)))
                )
        except (RunDirError, DamagedFileError) as exc:
            warnings.append(str(exc))
    if not found:
        return []
    found.sort(key=lambda pair: -pair[1].overall)
    rows = tuple(
        (name, summary.mode, _percent(summary.overall, not summary.complete),
         *(_percent(summary.groups[g], g in summary.partial) for g in COLUMNS),
         _completeness(summary))
        for name, summary in found
    )  # fmt: skip
    return [
        Table(
            title="BFCL",
            header=(
                "run",
                "mode",
                "overall %",
                *(f"{c} %" for c in COLUMNS.values()),
                "complete",
            ),
            rows=rows,
            right=(False, False, *([True] * (1 + len(COLUMNS))), False),
            notes=(
                "Groups and overall as BFCL v4's leaderboard computes them from the per-category "
                "accuracies (overall: non-live 10, live 10, irrelevance 10, multi-turn 30, "
                "agentic 40; relevance is outside it).",
                f"{PARTIAL}: counts categories the run did not run as 0, as BFCL does; "
                "'complete' names them (docs/bfcl.md).",
            ),
        )
    ]


def _percent(value: float, partial: bool) -> str:
    return f"{value * 100:.1f}{PARTIAL if partial else ''}"


def _completeness(summary: BfclSummary) -> str:
    if summary.complete:
        return "yes"
    return f"no: {len(summary.not_run)} not run ({', '.join(summary.not_run)})"
