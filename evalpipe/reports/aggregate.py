"""Pure frame → frame steps: per-run costs, scores with 95 % CIs, the leaderboard.

Scores are fractions (0–1) here; rendering decides how to show them. A task's score is its
primary metric (the first metric its samples record); a category's score is the micro mean
over all its samples' primary metrics; a subset's (`TASK/SUBSET`, e.g. `mmlu_pro/biology`) is
its task's breakdown metric `METRIC/SUBSET` (task files with `scorer.by_subset`).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd

from evalpipe.core.intervals import interval
from evalpipe.records.device import REMOTE_DEVICE
from evalpipe.reports.loading import RunSet
from evalpipe.rundir.occupancy import SUMS

By = Literal["category", "task", "subset"]

# Run-table columns, in display order after the identifying ones.
COST_COLUMNS = (
    "devices",
    "gpus",
    "wall_s",
    "gpu_hours",
    "generated_tokens",
    "tokens_per_s",
    "tokens_per_s_per_gpu",
    "peak_memory_gib",
    "mean_util_pct",
    "energy_j",
    "j_per_token",
)


def costs(jobs: pd.DataFrame, devices: pd.DataFrame) -> pd.DataFrame:
    """Per run: wall time, GPU-hours, throughput, peak memory, utilisation, energy per token.

    A run's jobs are its shards (or itself). Shards of an array may run side by side, so the
    run's wall time is the longest job's, while GPU-hours add up every job's wall × GPUs. The
    rate is generated tokens over generation seconds, both summed, i.e. one job's rate.
    """
    jobs = jobs.assign(
        gpu_s=jobs["wall_s"] * jobs["gpus"].where(jobs["gpus"] > 0),
    )
    by_run = jobs.groupby("run", sort=False)
    sums = by_run[["gpu_s", "generated_tokens", "generate_s"]].sum(min_count=1)
    # Runs that generated nothing (multiple choice by log-probabilities) have no token rates.
    generated = sums["generated_tokens"].where(sums["generated_tokens"] > 0)
    out = pd.DataFrame(
        {
            "gpus": by_run["gpus"].max(),
            "wall_s": by_run["wall_s"].max(),
            "gpu_hours": sums["gpu_s"] / 3600.0,
            "generated_tokens": sums["generated_tokens"],
            "tokens_per_s": generated / sums["generate_s"],
        }
    )
    out["tokens_per_s_per_gpu"] = out["tokens_per_s"] / out["gpus"].where(out["gpus"] > 0)
    # Batch occupancy: the share of generation wall with fewer than half the engine's slots
    # busy, and the tokens/s of that tail against the rest (NaN where no job recorded it); the
    # sequences the engine preempted.
    tail = by_run[list(SUMS)].sum(min_count=1)
    out["tail_share"] = tail["tail_s"] / (tail["tail_s"] + tail["rest_s"]).where(lambda s: s > 0)
    out["tail_tokens_per_s"] = tail["tail_tokens"] / tail["tail_s"].where(tail["tail_s"] > 0)
    out["rest_tokens_per_s"] = tail["rest_tokens"] / tail["rest_s"].where(tail["rest_s"] > 0)
    out["preemptions"] = tail["preemptions"]
    return out.join(_device_costs(devices), how="left").assign(
        j_per_token=lambda f: (
            f["energy_j"] / f["generated_tokens"].where(f["generated_tokens"] > 0)
        ),
        devices=lambda f: _device_labels(f),
    )


def _device_costs(devices: pd.DataFrame) -> pd.DataFrame:
    """GPU rows where a run has them, else its CPU-fallback rows (no energy on the CPU)."""
    columns = ["device_kind", "device_name", "peak_memory_gib", "mean_util_pct", "energy_j"]
    if devices.empty:
        return pd.DataFrame(columns=columns, index=pd.Index([], name="run"))
    is_gpu = devices["device"].str.startswith("gpu")
    gpu_runs = set(devices.loc[is_gpu, "run"])
    chosen = devices[is_gpu | ~devices["run"].isin(gpu_runs)]
    by_run = chosen.groupby("run", sort=False)
    energy_known = ~chosen["energy_j"].isna().groupby(chosen["run"]).any()
    return pd.DataFrame(
        {
            "device_kind": by_run["device"].first().map(_device_kind),
            "device_name": by_run["name"].first(),
            "peak_memory_gib": by_run["peak_memory_gib"].max(),
            "mean_util_pct": by_run["mean_util_pct"].mean(),
            "energy_j": by_run["energy_j"].sum(min_count=1).where(energy_known),
        }
    )


def _device_kind(device: str) -> str:
    """gpu, cpu (the monitor's CPU fallback) or remote (a server ran the model)."""
    if device.startswith("gpu"):
        return "gpu"
    return REMOTE_DEVICE if device == REMOTE_DEVICE else "cpu"


def _device_labels(frame: pd.DataFrame) -> pd.Series:
    def label(row: pd.Series) -> str:
        if row["device_kind"] == "gpu":
            return f"{int(row['gpus'])}×{row['device_name'] or 'GPU'}"
        if row["device_kind"] in ("cpu", REMOTE_DEVICE):
            return row["device_kind"]
        return f"{int(row['gpus'])}×GPU" if row["gpus"] > 0 else "—"  # no device readings

    if frame.empty:
        return pd.Series(dtype=object, index=frame.index)
    return frame.apply(label, axis=1)


def run_table(runset: RunSet) -> pd.DataFrame:
    """One row per run: identity, completeness and costs; complete runs first."""
    table = runset.runs.set_index("run").join(costs(runset.jobs, runset.devices), how="left")
    table = table.reset_index().sort_values(
        ["complete", "preset", "run_id"], ascending=[False, True, True], kind="stable"
    )
    return table.reset_index(drop=True)


def scores(runset: RunSet, by: By) -> pd.DataFrame:
    """Long table: run, group, metric, mean, stderr, ci_low, ci_high, n, n_total.

    stderr is the sample standard deviation / √n (0 for n = 1); ci_low..ci_high is the 95 %
    interval of evalpipe.core.intervals (Wilson for 0/1 scores, bootstrap otherwise). Groups known
    only from summary.json take its interval (NaN when written before intervals existed).
    """
    if by == "subset":
        primary = _breakdown(runset.samples).dropna(subset=["score"])
    else:
        primary = runset.samples[runset.samples["primary"]].dropna(subset=["score"])
    grouped = primary.groupby(["run", by], sort=False)["score"]
    measured = pd.DataFrame(
        {"mean": grouped.mean(), "sd": grouped.std(ddof=1), "n": grouped.count()}
    )
    measured["stderr"] = (measured["sd"] / np.sqrt(measured["n"])).where(measured["n"] > 1, 0.0)
    bounds = grouped.agg(lambda v: interval(v.to_numpy())[:2])
    measured["ci_low"] = bounds.map(lambda b: b[0])
    measured["ci_high"] = bounds.map(lambda b: b[1])
    metric_names = (
        primary[["run", by, "metric"]]
        .drop_duplicates()
        .sort_values("metric")
        .groupby(["run", by], sort=False)["metric"]
        .agg("/".join)
    )
    measured = measured.join(metric_names).drop(columns="sd")
    measured.index = measured.index.set_names(["run", "group"])

    fallback = runset.summary_scores[runset.summary_scores["kind"] == by]
    fallback = fallback.set_index(["run", "group"])[
        ["mean", "stderr", "n", "metric", "ci_low", "ci_high"]
    ]

    if by == "subset":  # a subset's size is not planned apart from its task's
        index = pd.MultiIndex.from_tuples([], names=["run", "group"])
        totals = pd.Series(name="n_total", dtype=float, index=index)
    else:
        totals = runset.totals.groupby(["run", by], sort=False)["n_total"].sum()
    totals.index = totals.index.set_names(["run", "group"])
    out = pd.concat([measured, fallback]).join(totals, how="outer")
    out["n"] = out["n"].fillna(0).astype(int)
    out = out.reset_index()
    return out[["run", "group", "metric", "mean", "stderr", "ci_low", "ci_high", "n", "n_total"]]


def _breakdown(samples: pd.DataFrame) -> pd.DataFrame:
    """The samples' `METRIC/SUBSET` rows as metric METRIC of group `TASK/SUBSET`."""
    rows = samples[samples["metric"].str.contains("/", regex=False)]
    parts = rows["metric"].str.partition("/")
    return rows.assign(metric=parts[0], subset=rows["task"] + "/" + parts[2])


def wide(table: pd.DataFrame, score_table: pd.DataFrame) -> pd.DataFrame:
    """The leaderboard as one numeric row per run: run columns, then `<group>:<stat>` columns."""
    stats = ["mean", "ci_low", "ci_high", "n", "n_total"]
    pivot = score_table.pivot(index="run", columns="group", values=stats)
    groups = list(dict.fromkeys(sorted(score_table["group"])))
    pivot.columns = [f"{group}:{stat}" for stat, group in pivot.columns]
    ordered = [f"{g}:{s}" for g in groups for s in stats]
    ids = [
        "run_id", "preset", "status", "complete", "n_done", "n_total", "shards",
        "ladder_quantization", "sandbox",
    ]  # fmt: skip
    base = table.set_index("run")[[*ids, *COST_COLUMNS]]
    return base.join(pivot.reindex(columns=ordered)).reset_index()
