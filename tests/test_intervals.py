"""Score intervals: Wilson against scipy and Newcombe (1998), bootstrap, summary and report."""

from __future__ import annotations

import pytest
from scipy.stats import binomtest

from evalpipe.core.intervals import bootstrap_mean, interval, wilson
from evalpipe.reports.tables import score_cell
from evalpipe.rundir.aggregation import metric_stats


@pytest.mark.parametrize(
    ("k", "n"), [(0, 10), (10, 10), (1, 10), (0, 1), (1, 1), (1, 200), (37, 50)]
)
def test_wilson_matches_scipy(k: int, n: int) -> None:
    ref = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    assert wilson(k, n) == pytest.approx((ref.low, ref.high), abs=1e-12)


@pytest.mark.parametrize(
    ("k", "n", "low", "high"),
    # Newcombe, Statistics in Medicine 17 (1998) 857-872, Table II, method 3 (Wilson score).
    [
        (81, 263, 0.2553, 0.3662),
        (15, 148, 0.0624, 0.1605),
        (0, 20, 0.0, 0.1611),
        (1, 29, 0.0061, 0.1718),
    ],
)
def test_wilson_matches_published_values(k: int, n: int, low: float, high: float) -> None:
    assert wilson(k, n) == pytest.approx((low, high), abs=5e-5)


@pytest.mark.parametrize(("k", "n"), [(0, 10), (10, 10), (0, 1), (3, 3)])
def test_no_interval_collapses_at_0_or_100_percent(k: int, n: int) -> None:
    low, high = wilson(k, n)
    assert high - low > 0.1
    assert low <= k / n <= high


def test_interval_picks_wilson_for_binary_and_bootstrap_otherwise() -> None:
    assert interval([0.0] * 10) == (0.0, pytest.approx(0.2775, abs=1e-4), "wilson")
    values = [0.25, 0.5, 0.75, 1.0, 0.0, 0.5]
    low, high, method = interval(values)
    assert method == "bootstrap" and low < sum(values) / 6 < high
    # Order-independent, so resumed or merged runs get the same summary.
    assert bootstrap_mean(values) == bootstrap_mean(values[::-1])


def test_summary_and_report_cell_carry_the_interval() -> None:
    stats = metric_stats([0.0] * 10)
    assert stats["ci_method"] == "wilson"
    assert (stats["ci_low"], stats["ci_high"]) == (0.0, pytest.approx(0.2775, abs=1e-4))
    cell = score_cell(stats["mean"], stats["ci_low"], stats["ci_high"], 10, 10)
    assert cell == "0.0 [0.0, 27.8] (10)"
    # A summary written before intervals existed still renders (without an interval).
    assert score_cell(0.5, float("nan"), float("nan"), 4, 4) == "50.0 (4)"
