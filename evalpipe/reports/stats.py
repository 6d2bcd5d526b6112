"""Statistics for comparing runs: paired bootstrap, exact McNemar, Holm.

numpy only (no scipy): the tests here need nothing more than resampling and a binomial tail.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from evalpipe.core import intervals

# Cap on resampled indices held at once (resamples × n), so memory stays ~32 MB for any n.
_CHUNK_ELEMENTS = 4_000_000


@dataclass(frozen=True, kw_only=True)
class Bootstrap:
    """Paired bootstrap of a mean difference: percentile 95 % CI and a two-sided p-value."""

    ci_low: float
    ci_high: float
    p: float


def paired_bootstrap(diffs: np.ndarray, *, resamples: int = 10_000, seed: int = 0) -> Bootstrap:
    """Resample the per-sample differences B − A with replacement (seeded, vectorised).

    p is twice the smaller share of resampled means on either side of 0, with the +1 correction
    so it is never reported as exactly 0 from a finite number of resamples.
    """
    diffs = np.asarray(diffs, dtype=float)
    n = diffs.size
    if n == 0:
        return Bootstrap(ci_low=math.nan, ci_high=math.nan, p=math.nan)
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    rows = max(1, _CHUNK_ELEMENTS // n)
    for start in range(0, resamples, rows):
        size = min(rows, resamples - start)
        means[start : start + size] = diffs[rng.integers(0, n, size=(size, n))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    side = min(int((means <= 0).sum()), int((means >= 0).sum()))
    return Bootstrap(
        ci_low=float(low), ci_high=float(high), p=min(1.0, 2 * (side + 1) / (resamples + 1))
    )


def mcnemar_exact(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided exact McNemar p for paired 0/1 outcomes: a binomial test on discordant pairs."""
    a = np.asarray(a) == 1
    b = np.asarray(b) == 1
    only_a = int((a & ~b).sum())
    only_b = int((b & ~a).sum())
    n = only_a + only_b
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(only_a, only_b) + 1))
    return min(1.0, 2 * tail / 2**n)  # exact integers: no overflow for any n


def is_binary(*arrays: np.ndarray) -> bool:
    """True when every value is 0 or 1 (accuracy-like metrics, where McNemar applies)."""
    return all(intervals.is_binary(x) for x in arrays)


def holm(p: np.ndarray) -> np.ndarray:
    """Holm–Bonferroni adjusted p-values (NaN stays NaN and does not count as a test)."""
    p = np.asarray(p, dtype=float)
    out = np.full(p.shape, np.nan)
    tested = np.flatnonzero(~np.isnan(p))
    if tested.size == 0:
        return out
    order = tested[np.argsort(p[tested], kind="stable")]
    m = order.size
    adjusted = np.maximum.accumulate((m - np.arange(m)) * p[order])
    out[order] = np.minimum(1.0, adjusted)
    return out
