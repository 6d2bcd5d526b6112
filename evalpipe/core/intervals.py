"""95 % confidence intervals for a score's mean: Wilson for 0/1 scores, bootstrap otherwise.

The normal approximation (mean ± 1.96 × stderr) collapses to zero width at 0 % and 100 %,
exactly where small smoke runs land; Wilson's score interval never does. numpy only, so
summary.json can carry intervals without importing the report stack.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

Z95 = 1.959963984540054  # two-sided 95 % standard normal quantile
BOOTSTRAP_RESAMPLES = 2_000
BOOTSTRAP_SEED = 0


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for `successes` of `n` (Wilson 1927; Newcombe 1998, method 3)."""
    if n <= 0:
        return (math.nan, math.nan)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    # Exact ends: at 0/n and n/n the formula gives 0 and 1 only up to rounding.
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return (low, high)


def bootstrap_mean(
    values: Sequence[float],
    weights: Sequence[float] | None = None,
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean, or with `weights` of the weighted mean
    sum(w * v) / sum(w) (samples are resampled whole, so the units inside one sample, such
    as one prompt's instructions, stay together). Pairs are sorted first so the result does
    not depend on record order (a resumed or merged run gets the same interval)."""
    ones = [1.0] * len(values) if weights is None else weights
    pairs = np.asarray(sorted(zip(values, ones, strict=True)), dtype=float).reshape(-1, 2)
    n = len(pairs)
    if n == 0:
        return (math.nan, math.nan)
    data, weight = pairs[:, 0] * pairs[:, 1], pairs[:, 1]
    rng = np.random.default_rng(seed)
    rows = max(1, 4_000_000 // n)  # bound memory of the index matrix at any n
    means = np.empty(resamples)
    for start in range(0, resamples, rows):
        size = min(rows, resamples - start)
        picks = rng.integers(0, n, size=(size, n))
        means[start : start + size] = data[picks].sum(axis=1) / weight[picks].sum(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return (float(low), float(high))


def is_binary(values: Sequence[float]) -> bool:
    return bool(np.isin(np.asarray(values, dtype=float), (0.0, 1.0)).all())


def interval(values: Sequence[float]) -> tuple[float, float, str]:
    """(low, high, method): Wilson when every value is 0 or 1, else the bootstrap."""
    if len(values) and is_binary(values):
        return (*wilson(round(math.fsum(values)), len(values)), "wilson")
    return (*bootstrap_mean(values), "bootstrap")


def interval_fields(values: Sequence[float]) -> dict[str, Any]:
    """`interval` as a results document records it: ci_low, ci_high, ci_method."""
    low, high, method = interval(values)
    return {"ci_low": low, "ci_high": high, "ci_method": method}
