"""Statistics for summary.json: per-metric means, standard errors and intervals over samples
(weighted where a score says so), and device summaries combined over shards.

Sums use math.fsum, so results do not depend on record order: a resumed, sharded or merged run
gives bit-identical numbers to an uninterrupted one.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from typing import Any

from evalpipe.core.intervals import bootstrap_mean, interval
from evalpipe.monitor.devicesummary import DeviceSummary
from evalpipe.rundir.samplelog import SampleRecord


def metric_stats(values: Sequence[float], weights: Sequence[float] | None = None) -> dict[str, Any]:
    """Mean, standard error, n (samples) and 95 % interval; with `weights`, of the weighted
    mean sum(w * v) / sum(w) (see WEIGHT_SUFFIX), its standard error that of a ratio estimator
    over samples and its interval a bootstrap over samples."""
    if weights is not None:
        return _weighted_stats(values, weights)
    n = len(values)
    mean = math.fsum(values) / n
    low, high, method = interval(values)
    bounds = {"ci_low": low, "ci_high": high, "ci_method": method}
    if n == 1:
        return {"mean": mean, "stderr": 0.0, "n": 1, **bounds}
    variance = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    return {"mean": mean, "stderr": math.sqrt(variance) / math.sqrt(n), "n": n, **bounds}


# A per-sample score `METRIC:weight` is not a metric: it weights METRIC's value of that sample
# in the task's and category's means. IFEval's instruction-level accuracy uses it (weight: the
# sample's number of instructions), so the mean is over instructions, as the reference's is.
WEIGHT_SUFFIX = ":weight"


def _weighted_stats(values: Sequence[float], weights: Sequence[float]) -> dict[str, Any]:
    n, total = len(values), math.fsum(weights)
    mean = math.fsum(v * w for v, w in zip(values, weights, strict=True)) / total
    low, high = bootstrap_mean(values, weights)
    bounds = {"ci_low": low, "ci_high": high, "ci_method": "bootstrap"}
    if n == 1:
        return {"mean": mean, "stderr": 0.0, "n": 1, **bounds}
    spread = math.fsum((w * (v - mean)) ** 2 for v, w in zip(values, weights, strict=True))
    return {"mean": mean, "stderr": math.sqrt(spread * n / (n - 1)) / total, "n": n, **bounds}


Values = tuple[list[float], list[float] | None]  # per-sample values, their weights if any


def by_metric(records: Iterable[SampleRecord]) -> dict[str, Values]:
    """Each metric's per-sample values (and weights, from its METRIC:weight score), sorted."""
    values: dict[str, list[float]] = {}
    for record in records:
        for metric, value in record.scores.items():
            values.setdefault(metric, []).append(value)
    return {
        m: (values[m], values.get(m + WEIGHT_SUFFIX))
        for m in sorted(values)
        if not m.endswith(WEIGHT_SUFFIX)
    }


def pooled_stats(values: list[float], weights: list[float]) -> dict[str, Any]:
    """A category's micro statistics: weighted only where some task's samples carry weights."""
    return metric_stats(values, None if all(w == 1.0 for w in weights) else weights)


def combine_devices(
    runs: Sequence[tuple[Sequence[DeviceSummary], float]],
) -> list[DeviceSummary]:
    """One entry per (host, device) from the device summaries of separate runs (the shards of
    an array job), each weighted by its wall time.

    Peak memory is the maximum, energy the sum (unknown if any run lacks it), utilisation the
    wall-time weighted mean.
    """
    merged: dict[tuple[str, str], DeviceSummary] = {}
    weights: dict[tuple[str, str], float] = {}
    for devices, seconds in runs:
        for d in devices:
            key = (d.host, d.device)
            if key not in merged:
                merged[key] = d
                weights[key] = seconds
                continue
            m = merged[key]
            merged[key] = dataclasses.replace(
                m,
                peak_memory_gib=_max(m.peak_memory_gib, d.peak_memory_gib),
                energy_j=_sum(m.energy_j, d.energy_j),
                mean_util_pct=_weighted(m.mean_util_pct, weights[key], d.mean_util_pct, seconds),
                samples=m.samples + d.samples,
            )
            weights[key] += seconds
    return list(merged.values())


def _max(a: float | None, b: float | None) -> float | None:
    present = [v for v in (a, b) if v is not None]
    return max(present) if present else None


def _sum(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b


def _weighted(a: float | None, wa: float, b: float | None, wb: float) -> float | None:
    if a is None or b is None:
        return a if b is None else b
    return (a * wa + b * wb) / (wa + wb) if wa + wb > 0 else (a + b) / 2
