"""The figures a judged benchmark reports from its judgments (HLE's accuracy, interval and
calibration error; SimpleQA's F-score), by its grading's kind: each made from the judgments'
kept `extracted` text, one per question (None: no verdict), and told in one phrase."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from evalpipe.tasks import hlegrading, simpleqa


@dataclass(frozen=True)
class BenchmarkMetrics:
    compute: Callable[[Sequence[str | None]], dict[str, Any]]
    describe: Callable[[dict[str, Any]], str]


METRICS = {
    "hle": BenchmarkMetrics(lambda kept: hlegrading.hle_metrics(kept).to_dict(),
                            hlegrading.describe),
    "simpleqa": BenchmarkMetrics(simpleqa.simpleqa_metrics, simpleqa.describe),
}  # fmt: skip


def benchmark_metrics(kind: object) -> BenchmarkMetrics | None:
    """The figures of a grading of `kind` (its definition's "kind"); None: it has none."""
    return METRICS.get(kind) if isinstance(kind, str) else None
