"""RULER in a report: per run that ran RULER, its table as RULER publishes it (from the run's
ruler_results.json): a row per task, a column per length, and the average per length."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evalpipe.core.errors import DamagedFileError, RunDirError
from evalpipe.reports.tables import DASH, Table
from evalpipe.rundir.kindresults import read_kind_results
from evalpipe.rundir.layout import RunDir

KIND = "ruler"


def ruler_tables(run_dirs: Sequence[Path], warnings: list[str]) -> list[Table]:
    """One RULER table per run that ran it (none when no run did); a document that cannot be
    read, or does not hold RULER's table, becomes a warning."""
    tables = []
    for run_dir in run_dirs:
        files = RunDir(run_dir)
        try:
            document = read_kind_results(files, KIND)
            if document is not None:
                tables.append(_table(run_dir.name, document))
        except (RunDirError, DamagedFileError) as exc:
            warnings.append(str(exc))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            warnings.append(f"{files.kind_results(KIND)} does not hold RULER's table ({exc!r}).")
    return tables


def _table(run: str, document: dict[str, Any]) -> Table:
    lengths = [str(n) for n in document["lengths"]]
    scores = document["scores"]
    rows = [(task, *(_cell(row.get(n)) for n in lengths)) for task, row in scores.items()]
    average = document["average"]
    rows.append(("average", *(f"{average[n]:.2f}" if n in average else DASH for n in lengths)))
    samples = sorted({cell["n"] for row in scores.values() for cell in row.values()})
    return Table(
        title=f"RULER: {run}",
        header=("task", *lengths),
        rows=tuple(rows),
        right=(False, *([True] * len(lengths))),
        notes=(
            "Scores 0-100 per task and length in tokens, as RULER's metrics give them "
            "(string_match_all; string_match_part for qa_1 and qa_2); the average is the mean "
            "over the tasks scored at that length (docs/ruler.md).",
            f"Samples per cell: {', '.join(map(str, samples))}.",
        ),
    )


def _cell(cell: dict[str, Any] | None) -> str:
    return DASH if cell is None else f"{cell['score']:.2f}"
