"""summary.json: aggregate sample records into it (pure: values in, values out), and read it
back as a typed record (`Summary`).

Per task and metric (`METRIC/SUBSET`: the metric over one subset's samples, e.g. MMLU-Pro's
accuracy per category; left out of the category figures): mean, standard error (sample standard
deviation / sqrt(n), 0 for n = 1), n, and a 95 % interval ci_low..ci_high (Wilson for 0/1
scores, bootstrap otherwise; computed in evalpipe.rundir.aggregation). Per category: micro (all
samples pooled) and macro (unweighted mean of task means). evalpipe.rundir.summarytext prints it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from evalpipe.monitor.summary import DeviceSummary
from evalpipe.rundir.aggregation import by_metric, metric_stats, pooled_stats
from evalpipe.rundir.layout import SCHEMA, RunDir
from evalpipe.rundir.manifest import Manifest, PlannedTask
from evalpipe.rundir.occupancy import SUMS, Occupancy
from evalpipe.rundir.results import SampleRecord, read_json, write_json
from evalpipe.rundir.timings import Timings


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
        values = by_metric(by_task[p.name])
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
                "micro": {m: pooled_stats(*v) for m, v in sorted(c["pooled"].items())},
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
