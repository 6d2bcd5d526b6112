"""Machine-readable outputs: CSV, JSON and XLSX that parse back into the same numbers.

Scores stay fractions (0–1) here, with their CI half-width and n as separate fields.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from evalpipe.core.errors import RunDirError
from evalpipe.reports.aggregate import COST_COLUMNS
from evalpipe.reports.compare import Comparison

JSON_SCHEMA = 1
_RUN_FIELDS = (
    "run_id", "preset", "run", "status", "complete", "n_done", "n_total", "shards",
    "ladder_quantization", "sandbox",
)  # fmt: skip


def _plain(value: Any) -> Any:
    """numpy/pandas scalars → JSON values; NaN and NA → null."""
    if value is None or value is pd.NA:
        return None
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [{k: _plain(v) for k, v in row.items()} for row in frame.to_dict("records")]


def to_json(
    table: pd.DataFrame,
    scores: pd.DataFrame,
    by: str,
    warnings: Sequence[str],
    comparison: Comparison | None = None,
) -> str:
    """{"schema", "by", "runs": [{run fields, costs, "scores": {group: {...}}}], "warnings"}."""
    by_run = {run: rows for run, rows in scores.groupby("run")}
    runs = []
    for row in _records(table[[*_RUN_FIELDS, *COST_COLUMNS]]):
        rows = by_run.get(row["run"], scores.iloc[:0])
        fields = ["metric", "mean", "stderr", "ci_low", "ci_high", "n", "n_total"]
        row["scores"] = {r.pop("group"): r for r in _records(rows[["group", *fields]])}
        runs.append(row)
    out: dict[str, Any] = {"schema": JSON_SCHEMA, "by": by, "runs": runs}
    if comparison is not None:
        out["compare"] = comparison_dict(comparison)
    out["warnings"] = list(warnings)
    return json.dumps(out, indent=2, allow_nan=False) + "\n"


def comparison_dict(comparison: Comparison) -> dict[str, Any]:
    return {
        "a": comparison.run_a,
        "b": comparison.run_b,
        "tasks": _records(comparison.tasks),
        "ratios": _records(comparison.ratios),
    }


def to_csv(frame: pd.DataFrame) -> str:
    return frame.to_csv(index=False)


def write_xlsx(path: Path, sheets: Mapping[str, pd.DataFrame]) -> None:
    """One worksheet per frame (openpyxl); the header row is frozen."""
    try:
        with pd.ExcelWriter(path, engine="openpyxl") as writer:
            for name, frame in sheets.items():
                frame.to_excel(writer, sheet_name=name, index=False, freeze_panes=(1, 0))
    except OSError as exc:
        raise RunDirError(f"Cannot write {str(path)!r}: {exc.strerror}.") from exc
