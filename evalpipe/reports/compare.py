"""Paired comparison of two runs: per-task score differences on shared samples, cost ratios.

Only samples both runs finished (key (task, sample_id)) are compared, so an incomplete run can
be compared on what it has. 0/1 metrics use the exact McNemar test; others the paired
bootstrap p. The CI of the difference is always the paired bootstrap percentile interval.
Holm's correction across tasks decides what is flagged significant.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np
import pandas as pd

from evalpipe.core.intervals import interval
from evalpipe.reports.stats import holm, is_binary, mcnemar_exact, paired_bootstrap

# Costs compared as B / A (below 1 is cheaper or faster for B, depending on the quantity).
RATIO_QUANTITIES = (
    "tokens_per_s",
    "tokens_per_s_per_gpu",
    "j_per_token",
    "gpu_hours",
    "wall_s",
    "peak_memory_gib",
    "mean_util_pct",
)


@dataclass(frozen=True, kw_only=True)
class Comparison:
    """tasks: one row per task; ratios: one row per cost quantity (a, b, b / a)."""

    run_a: str
    run_b: str
    tasks: pd.DataFrame
    ratios: pd.DataFrame


def paired_tasks(
    samples_a: pd.DataFrame,
    samples_b: pd.DataFrame,
    *,
    resamples: int = 10_000,
    seed: int = 0,
    alpha: float = 0.05,
) -> pd.DataFrame:
    """Per task of either run: B − A on the shared samples of A's primary metric, tested."""
    primary_a = samples_a[samples_a["primary"]][["task", "category", "metric"]].drop_duplicates(
        "task"
    )
    primary_b = samples_b[samples_b["primary"]][["task", "category", "metric"]].drop_duplicates(
        "task"
    )
    tasks = pd.concat([primary_a, primary_b]).drop_duplicates("task").sort_values("task")
    rows = []
    for task, category, metric in tasks.itertuples(index=False):
        a = _scores(samples_a, task, metric)
        b = _scores(samples_b, task, metric)
        shared = pd.concat([a.rename("a"), b.rename("b")], axis=1, join="inner").dropna()
        row = {
            "task": task,
            "category": category,
            "metric": metric,
            "n_a": len(a),
            "n_b": len(b),
            "n_shared": len(shared),
            "mean_a": shared["a"].mean(),
            "mean_b": shared["b"].mean(),
            "diff": shared["b"].mean() - shared["a"].mean(),
        }
        # Each run's own interval on the shared samples (never zero-width at 0 % or 100 %).
        for run in ("a", "b"):
            row[f"ci_{run}_low"], row[f"ci_{run}_high"], _ = interval(shared[run].to_numpy())
        if shared.empty:
            row.update(ci_low=np.nan, ci_high=np.nan, test="none", p=np.nan)
        else:
            # Seeded per task (by name), so a task's result does not depend on the others.
            boot = paired_bootstrap(
                (shared["b"] - shared["a"]).to_numpy(),
                resamples=resamples,
                seed=seed + zlib.crc32(task.encode()),
            )
            binary = is_binary(shared["a"].to_numpy(), shared["b"].to_numpy())
            row.update(
                ci_low=boot.ci_low,
                ci_high=boot.ci_high,
                test="mcnemar-exact" if binary else "paired-bootstrap",
                p=mcnemar_exact(shared["a"], shared["b"]) if binary else boot.p,
            )
        rows.append(row)
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    out["p_holm"] = holm(out["p"].to_numpy())
    out["significant"] = out["p_holm"] < alpha
    return out


def _scores(samples: pd.DataFrame, task: str, metric: str) -> pd.Series:
    rows = samples[(samples["task"] == task) & (samples["metric"] == metric)]
    return rows.set_index("sample_id")["score"]


def ratios(row_a: pd.Series, row_b: pd.Series) -> pd.DataFrame:
    """a, b and b / a for each cost quantity both runs measured (NaN where either did not)."""
    out = pd.DataFrame(
        {
            "quantity": list(RATIO_QUANTITIES),
            "a": [row_a.get(q, np.nan) for q in RATIO_QUANTITIES],
            "b": [row_b.get(q, np.nan) for q in RATIO_QUANTITIES],
        }
    )
    out[["a", "b"]] = out[["a", "b"]].astype(float)
    out["ratio"] = out["b"] / out["a"].where(out["a"] != 0)
    return out


def compare_runs(
    samples: pd.DataFrame,
    table: pd.DataFrame,
    run_a: str,
    run_b: str,
    *,
    resamples: int = 10_000,
    seed: int = 0,
    alpha: float = 0.05,
) -> Comparison:
    """Compare runs `run_a` and `run_b` (keys of `samples` and of the run `table`)."""
    rows = table.set_index("run")
    return Comparison(
        run_a=_label(rows.loc[run_a]),
        run_b=_label(rows.loc[run_b]),
        tasks=paired_tasks(
            samples[samples["run"] == run_a],
            samples[samples["run"] == run_b],
            resamples=resamples,
            seed=seed,
            alpha=alpha,
        ),
        ratios=ratios(rows.loc[run_a], rows.loc[run_b]),
    )


def _label(row: pd.Series) -> str:
    return f"{row['preset']} / {row['run_id']}"
