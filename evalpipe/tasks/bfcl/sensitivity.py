"""BFCL's format-sensitivity figures (outside its overall): the accuracy under each of its prompt
formats, and their spread across formats, as `bfcl evaluate`'s format_sensitivity_runner
computes them (the header fields of its score file)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any


def format_of(sample_id: str) -> str:
    """The prompt format an entry's id names ("format_sensitivity_N:FORMAT:ORIGINAL_ID")."""
    return sample_id.split(":")[1]


def spread(finished: Sequence[tuple[str, float]]) -> dict[str, Any]:
    """Per format (in the order met) its accuracy, correct and total entries, and across the
    formats BFCL's `accuracy_max_delta`, `accuracy_variance` and `accuracy_std` (percentage
    points, rounded to 2 places as BFCL rounds them; 0 with one format) from each entry's
    (id, accuracy)."""
    counts: dict[str, list[float]] = {}
    for sample_id, accuracy in finished:
        counts.setdefault(format_of(sample_id), []).append(accuracy)
    formats = {f: {"accuracy": sum(v) / len(v), "correct": sum(v), "total": len(v)}
               for f, v in counts.items()}  # fmt: skip
    found = [v["accuracy"] for v in formats.values()]
    across = {"accuracy_max_delta": 0.0, "accuracy_variance": 0.0, "accuracy_std": 0.0}
    if len(found) > 1:
        across = {
            "accuracy_max_delta": round((max(found) - min(found)) * 100, 2),
            "accuracy_variance": round(statistics.variance(found) * 100**2, 2),
            "accuracy_std": round(statistics.stdev(found) * 100, 2),
        }
    return {**across, "formats": formats}
