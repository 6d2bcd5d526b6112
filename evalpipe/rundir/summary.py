"""summary.json as one typed record (`Summary`): built from sample records by `summarize`
(pure: values in, values out), written by `write_summary`, read back by `read_summary`.

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

from evalpipe.monitor.devicesummary import DeviceSummary
from evalpipe.rundir.aggregation import by_metric, metric_stats, pooled_stats
from evalpipe.rundir.layout import SCHEMA, RunDir
from evalpipe.rundir.manifest import Manifest, PlannedTask
from evalpipe.rundir.occupancy import Occupancy, OccupancySummary
from evalpipe.rundir.samplelog import (
    SampleRecord,
    read_json,
    refusal_counts,
    unparsed_tool_calls,
    write_json,
)
from evalpipe.rundir.timings import Timings


@dataclass(frozen=True, kw_only=True)
class MetricSummary:
    """One metric over a task's (or a category's pooled) samples; None where not recorded."""

    mean: float | None = None
    stderr: float | None = None
    n: int | None = None
    ci_low: float | None = None  # absent from summaries written before intervals existed
    ci_high: float | None = None
    ci_method: str | None = None  # "wilson" or "bootstrap"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> MetricSummary:
        data = _object(data)
        method = data.get("ci_method")
        return cls(
            mean=_number(data.get("mean")),
            stderr=_number(data.get("stderr")),
            n=_int(data.get("n")),
            ci_low=_number(data.get("ci_low")),
            ci_high=_number(data.get("ci_high")),
            ci_method=method if isinstance(method, str) else None,
        )


@dataclass(frozen=True, kw_only=True)
class MacroSummary:
    """A category's unweighted mean of its tasks' means."""

    mean: float | None = None
    n_tasks: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"mean": self.mean, "n_tasks": self.n_tasks}

    @classmethod
    def from_dict(cls, data: Any) -> MacroSummary:
        data = _object(data)
        return cls(mean=_number(data.get("mean")), n_tasks=_int(data.get("n_tasks")))


@dataclass(frozen=True, kw_only=True)
class CategorySummary:
    micro: dict[str, MetricSummary] = field(default_factory=dict)  # all samples pooled
    macro: dict[str, MacroSummary] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "micro": {m: v.to_dict() for m, v in self.micro.items()},
            "macro": {m: v.to_dict() for m, v in self.macro.items()},
        }

    @classmethod
    def from_dict(cls, data: Any) -> CategorySummary:
        micro, macro = _object(_object(data).get("micro")), _object(_object(data).get("macro"))
        return cls(
            micro={str(m): MetricSummary.from_dict(v) for m, v in micro.items()},
            macro={str(m): MacroSummary.from_dict(v) for m, v in macro.items()},
        )


@dataclass(frozen=True, kw_only=True)
class TaskSummary:
    category: str
    n: int | None = None  # samples done; None when the file does not say
    n_total: int | None = None
    metrics: dict[str, MetricSummary] = field(default_factory=dict)  # first: the primary one
    # Reasoning models only (None otherwise): tokens spent reasoning, and completions cut off
    # inside their reasoning (scored as unanswered).
    reasoning_tokens: int | None = None
    cut_off_in_reasoning: int | None = None
    # Samples the engine refused (scored 0, counted in n), by reason (context_overflow, …).
    refused: dict[str, int] = field(default_factory=dict)
    # Completions that began a tool call their parser could not read (recorded per sample).
    unparsed_tool_calls: int = 0

    def to_dict(self) -> dict[str, Any]:
        reasoning = {
            "reasoning_tokens": self.reasoning_tokens,
            "cut_off_in_reasoning": self.cut_off_in_reasoning,
        }
        data: dict[str, Any] = {
            "category": self.category,
            "n": self.n,
            "n_total": self.n_total,
            "metrics": {m: v.to_dict() for m, v in self.metrics.items()},
        } | {k: v for k, v in reasoning.items() if v is not None}
        if self.refused:
            data["refused"] = dict(self.refused)
        if self.unparsed_tool_calls:
            data["unparsed_tool_calls"] = self.unparsed_tool_calls
        return data

    @classmethod
    def from_dict(cls, data: Any) -> TaskSummary:
        data = _object(data)
        return cls(
            category=str(data.get("category") or ""),
            n=_int(data.get("n")),
            n_total=_int(data.get("n_total")),
            metrics={
                str(m): MetricSummary.from_dict(v) for m, v in _object(data.get("metrics")).items()
            },
            reasoning_tokens=_int(data.get("reasoning_tokens")),
            cut_off_in_reasoning=_int(data.get("cut_off_in_reasoning")),
            refused={
                str(k): v for k, v in _object(data.get("refused")).items() if _int(v) is not None
            },
            unparsed_tool_calls=_int(data.get("unparsed_tool_calls")) or 0,
        )


@dataclass(frozen=True, kw_only=True)
class Throughput:
    wall_s: float | None = None
    load_s: float | None = None
    generate_s: float | None = None
    prompt_tokens: int | None = None
    generated_tokens: int | None = None
    tokens_per_s: float | None = None  # None when nothing was generated: there is no rate
    tokens_per_s_per_gpu: float | None = None
    gpus: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> Throughput:
        data = _object(data)
        return cls(
            wall_s=_number(data.get("wall_s")),
            load_s=_number(data.get("load_s")),
            generate_s=_number(data.get("generate_s")),
            prompt_tokens=_int(data.get("prompt_tokens")),
            generated_tokens=_int(data.get("generated_tokens")),
            tokens_per_s=_number(data.get("tokens_per_s")),
            tokens_per_s_per_gpu=_number(data.get("tokens_per_s_per_gpu")),
            gpus=_int(data.get("gpus")),
        )


@dataclass(frozen=True, kw_only=True)
class Summary:
    """summary.json: written by `summarize`, read back by `read_summary`. Every figure is
    optional, since a reader meets files of every version and of runs killed at any point."""

    schema: int | None = SCHEMA
    run_id: str | None = None
    preset: str | None = None
    complete: bool = False
    n_done: int | None = None
    n_total: int | None = None
    tasks: dict[str, TaskSummary] = field(default_factory=dict)
    categories: dict[str, CategorySummary] = field(default_factory=dict)
    throughput: Throughput = field(default_factory=Throughput)
    devices: list[DeviceSummary] = field(default_factory=list)
    oom_fallback: list[str] = field(default_factory=list)
    # The share of generation wall with fewer than half the engine's slots busy, and the
    # tokens/s of that tail against the rest; None where the engine did not report slots.
    occupancy: OccupancySummary | None = None
    # The code sandbox's isolation level where the run scored code (Manifest.sandbox).
    sandbox: str | None = None

    def to_dict(self) -> dict[str, Any]:
        generated = self.throughput.generated_tokens
        return {
            "schema": self.schema,
            "run_id": self.run_id,
            "preset": self.preset,
            "complete": self.complete,
            "n_done": self.n_done,
            "n_total": self.n_total,
            "tasks": {name: t.to_dict() for name, t in self.tasks.items()},
            "categories": {name: c.to_dict() for name, c in self.categories.items()},
            "throughput": self.throughput.to_dict(),
            # Energy per generated token: derived, so never stored apart from its inputs.
            "devices": [
                d.to_dict()
                | {
                    "j_per_token": d.energy_j / generated
                    if d.energy_j is not None and generated
                    else None
                }
                for d in self.devices
            ],
            "oom_fallback": list(self.oom_fallback),
            "occupancy": None if self.occupancy is None else self.occupancy.to_dict(),
        } | ({} if self.sandbox is None else {"sandbox": self.sandbox})

    @classmethod
    def from_dict(cls, data: Any) -> Summary:
        data = _object(data)
        devices = data.get("devices")
        fallback = data.get("oom_fallback")
        occupancy = data.get("occupancy")
        return cls(
            schema=_int(data.get("schema")),
            run_id=None if data.get("run_id") is None else str(data["run_id"]),
            preset=None if data.get("preset") is None else str(data["preset"]),
            complete=bool(data.get("complete")),
            n_done=_int(data.get("n_done")),
            n_total=_int(data.get("n_total")),
            tasks={
                str(name): TaskSummary.from_dict(info)
                for name, info in _object(data.get("tasks")).items()
                if isinstance(info, dict)
            },
            categories={
                str(name): CategorySummary.from_dict(info)
                for name, info in _object(data.get("categories")).items()
            },
            throughput=Throughput.from_dict(data.get("throughput")),
            devices=[
                DeviceSummary.from_dict(_object(d))
                for d in (devices if isinstance(devices, list) else ())
            ],
            oom_fallback=[str(f) for f in fallback] if isinstance(fallback, list) else [],
            occupancy=OccupancySummary.from_dict(occupancy)
            if isinstance(occupancy, dict)
            else None,
            sandbox=None if data.get("sandbox") is None else str(data["sandbox"]),
        )


def _reasoning(records: Sequence[SampleRecord]) -> dict[str, int]:
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
) -> Summary:
    """summary.json for `records` of a run that planned `planned` (in run order)."""
    by_task: dict[str, list[SampleRecord]] = {p.name: [] for p in planned}
    for record in records:
        by_task.setdefault(record.task, []).append(record)
    tasks: dict[str, TaskSummary] = {}
    pooled: dict[str, dict[str, tuple[list[float], list[float]]]] = {}
    task_means: dict[str, dict[str, list[float]]] = {}
    for p in planned:
        values = by_metric(by_task[p.name])
        metrics = {m: MetricSummary(**metric_stats(*v)) for m, v in values.items()}
        tasks[p.name] = TaskSummary(
            category=p.category,
            n=len(by_task[p.name]),
            n_total=p.n_total,
            metrics=metrics,
            **_reasoning(by_task[p.name]),
            refused=refusal_counts(by_task[p.name]),
            unparsed_tool_calls=unparsed_tool_calls(by_task[p.name]),
        )
        cat_pooled = pooled.setdefault(p.category, {})
        cat_means = task_means.setdefault(p.category, {})
        for metric, (vals, weights) in values.items():
            if "/" in metric:  # one task's breakdown (accuracy/SUBSET), not a category figure
                continue
            pooled_values, pooled_weights = cat_pooled.setdefault(metric, ([], []))
            pooled_values.extend(vals)
            pooled_weights.extend(weights or [1.0] * len(vals))
            cat_means.setdefault(metric, []).append(metrics[metric].mean)
    n_done = sum(len(by_task[name]) for name in tasks)
    n_total = sum(p.n_total for p in planned)
    prompt_tokens = sum(r.prompt_tokens for r in records)
    generated = sum(sum(r.completion_tokens) for r in records)
    generate_s = Timings(timings).total_s("generate")
    tokens_per_s = generated / generate_s if generate_s > 0 and generated > 0 else None
    return Summary(
        run_id=run_id,
        preset=preset,
        complete=n_done == n_total,
        n_done=n_done,
        n_total=n_total,
        tasks=tasks,
        categories={
            name: CategorySummary(
                micro={
                    m: MetricSummary(**pooled_stats(*v)) for m, v in sorted(pooled[name].items())
                },
                macro={
                    m: MacroSummary(mean=math.fsum(v) / len(v), n_tasks=len(v))
                    for m, v in sorted(task_means[name].items())
                },
            )
            for name in pooled
        },
        throughput=Throughput(
            wall_s=round(wall_s, 3),
            load_s=round(Timings(timings).load_s, 3),
            generate_s=round(generate_s, 3),
            prompt_tokens=prompt_tokens,
            generated_tokens=generated,
            tokens_per_s=tokens_per_s,
            tokens_per_s_per_gpu=tokens_per_s / gpus if gpus and tokens_per_s else None,
            gpus=gpus,
        ),
        devices=list(devices),
        oom_fallback=list(oom_fallback),
        occupancy=occupancy.summary() if occupancy is not None else None,
    )


def summarize_run(
    records: Sequence[SampleRecord], manifest: Manifest, *, complete: bool | None = None
) -> Summary:
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
    summary = dataclasses.replace(summary, sandbox=manifest.sandbox)
    return summary if complete is None else dataclasses.replace(summary, complete=complete)


def write_summary(files: RunDir, summary: Summary) -> None:
    """Replace summary.json atomically."""
    write_json(files.summary, summary.to_dict())


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
    """A number as written (an int stays an int, so a record read back writes the same JSON)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
