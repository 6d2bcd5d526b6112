"""summary.json: aggregate sample records into it (pure: values in, values out), and read it
back as a typed record (`Summary`).

Per task and metric (`METRIC/SUBSET`: the metric over one subset's samples, e.g. MMLU-Pro's
accuracy per category; left out of the category figures): mean, standard error (sample standard
deviation / sqrt(n), 0 for n = 1), n, and a 95 % interval ci_low..ci_high (Wilson for 0/1
scores, bootstrap otherwise; see evalpipe.core.intervals). Per category: micro (all samples
pooled) and macro (unweighted mean of task means).
Sums use math.fsum, so results do not depend on record order: a resumed, sharded or merged run
gives bit-identical numbers to an uninterrupted one.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from evalpipe.core.intervals import bootstrap_mean, interval
from evalpipe.core.textable import format_table
from evalpipe.monitor.summary import DeviceSummary
from evalpipe.rundir.layout import SCHEMA, RunDir
from evalpipe.rundir.manifest import Manifest, PlannedTask
from evalpipe.rundir.occupancy import SUMS, Occupancy
from evalpipe.rundir.results import SampleRecord, read_json, write_json
from evalpipe.rundir.timings import Timings


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


def _by_metric(records: Iterable[SampleRecord]) -> dict[str, Values]:
    values: dict[str, list[float]] = {}
    for record in records:
        for metric, value in record.scores.items():
            values.setdefault(metric, []).append(value)
    return {
        m: (values[m], values.get(m + WEIGHT_SUFFIX))
        for m in sorted(values)
        if not m.endswith(WEIGHT_SUFFIX)
    }


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


def _reasoning(records: Sequence[SampleRecord]) -> dict[str, Any]:
    """Reasoning models: tokens spent reasoning, and completions cut off inside their
    reasoning (scored as unanswered); nothing for tasks without reasoning."""
    if not any(r.reasoning for r in records):
        return {}
    return {
        "reasoning_tokens": sum(sum(r.reasoning_tokens) for r in records),
        "cut_off_in_reasoning": sum(sum(r.cut_off) for r in records),
    }


def summarize(
    records: Sequence[SampleRecord],
    *,
    run_id: str,
    preset: str,
    planned: Sequence[PlannedTask],
    timings: Mapping[str, float],
    wall_s: float,
    devices: Sequence[DeviceSummary],
    gpus: int,
    oom_fallback: Sequence[str],
    occupancy: Occupancy | None = None,
) -> dict[str, Any]:
    """summary.json for `records` of a run that planned `planned` (in run order)."""
    by_task: dict[str, list[SampleRecord]] = {p.name: [] for p in planned}
    for record in records:
        by_task.setdefault(record.task, []).append(record)
    tasks: dict[str, Any] = {}
    categories: dict[str, dict[str, Any]] = {}
    for p in planned:
        values = _by_metric(by_task[p.name])
        tasks[p.name] = {
            "category": p.category,
            "n": len(by_task[p.name]),
            "n_total": p.n_total,
            "metrics": {m: metric_stats(*v) for m, v in values.items()},
        } | _reasoning(by_task[p.name])
        cat = categories.setdefault(p.category, {"pooled": {}, "task_means": {}})
        for metric, (vals, weights) in values.items():
            if "/" in metric:  # one task's breakdown (accuracy/SUBSET), not a category figure
                continue
            pooled, pooled_weights = cat["pooled"].setdefault(metric, ([], []))
            pooled.extend(vals)
            pooled_weights.extend(weights or [1.0] * len(vals))
            cat["task_means"].setdefault(metric, []).append(
                tasks[p.name]["metrics"][metric]["mean"]
            )
    n_done = sum(t["n"] for t in tasks.values())
    n_total = sum(p.n_total for p in planned)
    prompt_tokens = sum(r.prompt_tokens for r in records)
    generated = sum(sum(r.completion_tokens) for r in records)
    generate_s = Timings(timings).total_s("generate")
    # None when nothing was generated (multiple choice by log-probabilities): there is no rate.
    tokens_per_s = generated / generate_s if generate_s > 0 and generated > 0 else None
    return {
        "schema": SCHEMA,
        "run_id": run_id,
        "preset": preset,
        "complete": n_done == n_total,
        "n_done": n_done,
        "n_total": n_total,
        "tasks": tasks,
        "categories": {
            name: {
                "micro": {m: _pooled_stats(*v) for m, v in sorted(c["pooled"].items())},
                "macro": {
                    m: {"mean": math.fsum(v) / len(v), "n_tasks": len(v)}
                    for m, v in sorted(c["task_means"].items())
                },
            }
            for name, c in categories.items()
        },
        "throughput": {
            "wall_s": round(wall_s, 3),
            "load_s": round(Timings(timings).load_s, 3),
            "generate_s": round(generate_s, 3),
            "prompt_tokens": prompt_tokens,
            "generated_tokens": generated,
            "tokens_per_s": tokens_per_s,
            "tokens_per_s_per_gpu": tokens_per_s / gpus if gpus and tokens_per_s else None,
            "gpus": gpus,
        },
        "devices": [
            d.to_dict()
            | {
                "j_per_token": d.energy_j / generated
                if d.energy_j is not None and generated
                else None
            }
            for d in devices
        ],
        "oom_fallback": list(oom_fallback),
        # The share of generation wall with fewer than half the engine's slots busy, and the
        # tokens/s of that tail against the rest; None where the engine did not report slots.
        "occupancy": occupancy.summary() if occupancy is not None else None,
    }


def _fmt(stats: Mapping[str, Any]) -> str:
    return f"{stats['mean']:.3f}"


def _ci(stats: Mapping[str, Any]) -> str:
    """'[0.000, 0.278]'; summaries written before intervals existed show their stderr."""
    if "ci_low" not in stats:
        return f"±{stats['stderr']:.3f}"
    return f"[{stats['ci_low']:.3f}, {stats['ci_high']:.3f}]"


def _pooled_stats(values: list[float], weights: list[float]) -> dict[str, Any]:
    """A category's micro statistics: weighted only where some task's samples carry weights."""
    return metric_stats(values, None if all(w == 1.0 for w in weights) else weights)


def format_summary(summary: Mapping[str, Any]) -> str:
    """The results table printed at the end of `evalpipe run` and `evalpipe merge`."""
    rows: list[tuple[object, ...]] = []
    for name, task in summary["tasks"].items():
        for metric, s in task["metrics"].items():
            # A subset's breakdown counts its own samples; its planned total is not known.
            n = s["n"] if "/" in metric else f"{task['n']}/{task['n_total']}"
            rows.append((task["category"], name, metric, n, _fmt(s), _ci(s)))
        if not task["metrics"]:
            rows.append((task["category"], name, "-", f"0/{task['n_total']}", "-", ""))
    for name, cat in summary["categories"].items():
        for metric, s in cat["micro"].items():
            rows.append((name, "(micro)", metric, s["n"], _fmt(s), _ci(s)))
        for metric, s in cat["macro"].items():
            tasks = f"{s['n_tasks']} task" + ("s" if s["n_tasks"] != 1 else "")
            rows.append((name, "(macro)", metric, tasks, _fmt(s), ""))
    table = format_table(("category", "task", "metric", "n", "mean", "95% CI"), rows)
    t = summary["throughput"]
    rate = f"{t['tokens_per_s']:.1f} tok/s" if t["tokens_per_s"] else "n/a"
    work = (
        f"{t['generated_tokens']} tokens generated in {t['generate_s']:.1f} s ({rate})"
        if t["generated_tokens"]
        else f"nothing generated, options scored in {t['generate_s']:.1f} s"
    )
    status = "complete" if summary["complete"] else "INCOMPLETE"
    return (
        f"{table}\n\n{summary['n_done']}/{summary['n_total']} samples ({status}); "
        f"{work}; load {t['load_s']:.1f} s, wall {t['wall_s']:.1f} s"
        + _occupancy_line(summary.get("occupancy"))
    )


def _occupancy_line(occupancy: Mapping[str, Any] | None) -> str:
    """'tail: 23% of generation with < half of 64 slots busy, 310 tok/s against 1,020; 12
    preemptions'."""
    if not occupancy:
        return ""
    rates = [occupancy.get("tail_tokens_per_s"), occupancy.get("rest_tokens_per_s")]
    speed = f", {rates[0]:,.0f} tok/s against {rates[1]:,.0f}" if None not in rates else ""
    preempted = occupancy.get("preemptions")
    preempted_text = "" if preempted is None else f"; {preempted:,} preemptions (KV cache full)"
    return (
        f"\ntail: {occupancy['tail_share']:.0%} of generation with < half of "
        f"{occupancy['slots']} sequence slots busy{speed}{preempted_text}"
    )


def summarize_run(
    records: Sequence[SampleRecord], manifest: Manifest, *, complete: bool | None = None
) -> dict[str, Any]:
    """summary.json from a run directory's records and manifest (runner and merge alike).

    Timings and wall time add up over every attempt (and shard) recorded in the manifest.
    The GPU count is every replica's TP × PP when the monitor saw GPUs, else 0 (a CPU run).
    `complete` overrides n_done == n_total where the caller knows better (a merge missing a
    shard that never started cannot count that shard's samples).
    """
    devices = manifest.devices
    saw_gpu = any(d.is_gpu for d in devices)
    summary = summarize(
        records,
        run_id=manifest.run_id,
        preset=manifest.preset_name,
        planned=manifest.samples_planned,
        timings=manifest.timings,
        wall_s=manifest.wall_s,
        devices=devices,
        gpus=manifest.config.gpus if saw_gpu else 0,
        oom_fallback=manifest.oom_fallback,
        occupancy=manifest.occupancy,
    )
    return summary if complete is None else summary | {"complete": complete}


@dataclass(frozen=True, kw_only=True)
class MetricSummary:
    """One metric over a task's (or a category's pooled) samples; None where not recorded."""

    mean: float | None = None
    stderr: float | None = None
    n: float | None = None
    ci_low: float | None = None  # absent from summaries written before intervals existed
    ci_high: float | None = None

    @classmethod
    def from_dict(cls, data: Any) -> MetricSummary:
        data = _object(data)
        return cls(**{f.name: _number(data.get(f.name)) for f in dataclasses.fields(cls)})


@dataclass(frozen=True, kw_only=True)
class TaskSummary:
    category: str
    n_total: int | None  # None when the file does not say
    metrics: dict[str, MetricSummary] = field(default_factory=dict)  # first: the primary one


@dataclass(frozen=True, kw_only=True)
class Throughput:
    wall_s: float | None = None
    generate_s: float | None = None
    prompt_tokens: float | None = None
    generated_tokens: float | None = None
    tokens_per_s: float | None = None
    gpus: int | None = None
    # summary.json's `occupancy` (absent before it existed, or where the engine did not say):
    # generation steps with fewer than half the engine's slots busy (tail) and the rest
    tail_share: float | None = None
    tail_s: float | None = None
    tail_tokens: float | None = None
    rest_s: float | None = None
    rest_tokens: float | None = None
    preemptions: float | None = None  # sequences the engine preempted (its KV cache full)


@dataclass(frozen=True, kw_only=True)
class Summary:
    """summary.json as read back by reports: every figure optional, since a reader meets files
    of every version and of runs killed at any point."""

    preset: str | None = None
    complete: bool = False
    n_done: int | None = None
    tasks: dict[str, TaskSummary] = field(default_factory=dict)
    categories: dict[str, dict[str, MetricSummary]] = field(default_factory=dict)  # micro
    throughput: Throughput = field(default_factory=Throughput)
    devices: list[DeviceSummary] = field(default_factory=list)
    schema: int | None = SCHEMA

    @classmethod
    def from_dict(cls, data: Any) -> Summary:
        data = _object(data)
        tasks = {
            str(name): TaskSummary(
                category=str(info.get("category") or ""),
                n_total=_int(info.get("n_total")),
                metrics={
                    str(m): MetricSummary.from_dict(v)
                    for m, v in _object(info.get("metrics")).items()
                },
            )
            for name, info in _object(data.get("tasks")).items()
            if isinstance(info, dict)
        }
        categories = {
            str(name): {
                str(m): MetricSummary.from_dict(v)
                for m, v in _object(_object(info).get("micro")).items()
            }
            for name, info in _object(data.get("categories")).items()
        }
        t = _object(data.get("throughput"))
        occupancy = _object(data.get("occupancy"))
        devices = data.get("devices")
        return cls(
            preset=None if data.get("preset") is None else str(data["preset"]),
            complete=bool(data.get("complete")),
            n_done=_int(data.get("n_done")),
            tasks=tasks,
            categories=categories,
            throughput=Throughput(
                wall_s=_number(t.get("wall_s")),
                generate_s=_number(t.get("generate_s")),
                prompt_tokens=_number(t.get("prompt_tokens")),
                generated_tokens=_number(t.get("generated_tokens")),
                tokens_per_s=_number(t.get("tokens_per_s")),
                gpus=_int(t.get("gpus")),
                **{name: _number(occupancy.get(name)) for name in (*SUMS, "tail_share")},
            ),
            devices=[
                DeviceSummary.from_dict(_object(d))
                for d in (devices if isinstance(devices, list) else ())
            ],
            schema=data.get("schema") if isinstance(data.get("schema"), int) else None,
        )


def write_summary(files: RunDir, summary: Mapping[str, Any]) -> None:
    """Replace summary.json (as `summarize` built it) atomically."""
    write_json(files.summary, summary)


def read_summary(files: RunDir) -> Summary | None:
    """The run directory's summary.json; None when it has none. The manifest's error policy
    (evalpipe.rundir.manifest.read_manifest): RunDirError when unreadable, DamagedFileError when
    it is not a JSON object."""
    if not files.summary.exists():
        return None
    return Summary.from_dict(read_json(files.summary))


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
