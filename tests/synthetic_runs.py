"""Synthetic run directories in the run-directory contract, for tests and benchmarks.

Writes what the runner, the monitor and `evalpipe merge` would: samples.jsonl, manifest.json,
summary.json (aggregates computed the runner's way) and metrics.csv. Numbers are given, not
random, so tests can check the report's arithmetic by hand.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from evalpipe.monitor.devicesummary import DeviceSummary
from evalpipe.rundir.aggregation import metric_stats
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.manifest import Manifest, PlannedTask, RunStatus
from evalpipe.rundir.runconfig import RunConfig
from evalpipe.rundir.samplelog import SampleLog, SampleRecord
from evalpipe.rundir.summary import (
    CategorySummary,
    MetricSummary,
    Summary,
    TaskSummary,
    Throughput,
)


def append_samples(path: Path, records: Sequence[SampleRecord]) -> None:
    """Append records to a sample log as the runner does, durable before returning."""
    with SampleLog(path, fsync_samples=1) as log:
        log.append(records)


@dataclass(frozen=True, kw_only=True)
class SyntheticRun:
    """One job's results. `tasks` maps task → (category, per-sample primary scores)."""

    run_id: str
    preset: str
    tasks: Mapping[str, tuple[str, Sequence[float]]]
    metric: str = "accuracy"
    first_id: int = 0  # sample ids are "<task>-<first_id + i>": shards of a run hold distinct ids
    n_total: Mapping[str, int] = field(default_factory=dict)  # default: all samples done
    status: RunStatus = "complete"
    shard: str | None = None  # "i/N"
    gpus: int = 1
    device_name: str = "NVIDIA H100 80GB HBM3"
    wall_s: float = 100.0
    generate_s: float = 80.0
    generated_tokens: int = 40_000
    prompt_tokens: int = 10_000
    peak_memory_gib: Sequence[float] = (70.0,)  # one per device
    mean_util_pct: Sequence[float] = (90.0,)
    energy_j: Sequence[float] | None = (20_000.0,)  # None: no NVML (CPU fallback)
    on_cpu: bool = False  # the monitor's CPU fallback: one "cpu" device, no energy
    metrics_csv: bool = True
    oom_fallback: Sequence[str] = ()  # the OOM ladder's step records, as the runner writes them


def _devices(run: SyntheticRun) -> list[DeviceSummary]:
    names = ["cpu"] if run.on_cpu else [f"gpu{i}" for i in range(len(run.peak_memory_gib))]
    return [
        DeviceSummary(
            device=name,
            host="node1",
            name="cpu" if run.on_cpu else run.device_name,
            peak_memory_gib=run.peak_memory_gib[i],
            mean_util_pct=run.mean_util_pct[i],
            energy_j=None if run.energy_j is None or run.on_cpu else run.energy_j[i],
        )
        for i, name in enumerate(names)
    ]


def write_run(path: Path, run: SyntheticRun) -> Path:
    """Write `run` into `path` (created) and return it."""
    path.mkdir(parents=True, exist_ok=True)
    records = []
    by_category: dict[str, list[float]] = {}
    tasks_summary: dict[str, TaskSummary] = {}
    for task, (category, values) in run.tasks.items():
        for i, value in enumerate(values):
            records.append(
                SampleRecord(
                    task=task,
                    category=category,
                    sample_id=f"{task}-{run.first_id + i}",
                    prompt=f"Question {i} of {task}?",
                    completions=(f"answer {i}",),
                    extracted=(str(i),),
                    scores={run.metric: value},
                    prompt_tokens=12,
                    completion_tokens=(7,),
                )
            )
        by_category.setdefault(category, []).extend(values)
        tasks_summary[task] = TaskSummary(
            category=category,
            n=len(values),
            n_total=run.n_total.get(task, len(values)),
            metrics={run.metric: MetricSummary(**metric_stats(values))} if values else {},
        )
    files = RunDir(path)
    files.samples.write_text("".join(json.dumps(r.to_dict()) + "\n" for r in records))
    n_done = sum(len(v) for _, v in run.tasks.values())
    n_total = sum(run.n_total.get(task, len(v)) for task, (_, v) in run.tasks.items())
    rate = run.generated_tokens / run.generate_s if run.generated_tokens else None
    summary = Summary(
        run_id=run.run_id,
        preset=run.preset,
        complete=run.status == "complete" and n_done == n_total,
        n_done=n_done,
        n_total=n_total,
        tasks=tasks_summary,
        categories={
            cat: CategorySummary(
                micro={run.metric: MetricSummary(**metric_stats(values))} if values else {}
            )
            for cat, values in by_category.items()
        },
        throughput=Throughput(
            wall_s=run.wall_s,
            load_s=run.wall_s - run.generate_s,
            generate_s=run.generate_s,
            prompt_tokens=run.prompt_tokens,
            generated_tokens=run.generated_tokens,
            tokens_per_s=rate,
            tokens_per_s_per_gpu=rate / max(run.gpus, 1) if rate else None,
            gpus=run.gpus,
        ),
        devices=_devices(run),
        oom_fallback=list(run.oom_fallback),
    )
    manifest = Manifest(
        run_id=run.run_id,
        status=run.status,
        preset={"name": run.preset},
        config=RunConfig(
            preset=run.preset, backend="fake", tasks=tuple(run.tasks), shard=run.shard
        ),
        config_hash="synthetic",
        started_at="2026-01-01T00:00:00Z",
        samples_planned=[
            PlannedTask(name=task, category=info.category, n_total=info.n_total or 0)
            for task, info in tasks_summary.items()
        ],
        timings={"load": run.wall_s - run.generate_s, "generate": run.generate_s},
        oom_fallback=list(run.oom_fallback),
    )
    # Plain writes, not the runner's fsynced ones: benchmarks write thousands of these.
    files.summary.write_text(json.dumps(summary.to_dict(), indent=1))
    files.manifest.write_text(json.dumps(manifest.to_dict(), indent=1))
    if run.metrics_csv:
        files.metrics.write_text(_metrics_csv(run, sorted(by_category)))
    return path


def _metrics_csv(run: SyntheticRun, categories: Sequence[str]) -> str:
    """One sample per device per second: load (memory ramps up), then a generate phase per
    category (memory at its peak, utilisation at its mean), energy accumulating."""
    header = (
        "time_s,host,device,phase,memory_used_gib,memory_total_gib,util_pct,mem_util_pct,"
        "temperature_c,power_w,sm_clock_mhz,energy_j"
    )
    load_s = run.wall_s - run.generate_s
    per_category = run.generate_s / max(len(categories), 1)
    rows = [header]
    for device in _devices(run):
        peak = device.peak_memory_gib or 0.0
        energy_total = device.energy_j
        for t in range(int(run.wall_s) + 1):
            if t < load_s:
                phase, memory, util = "load", peak * t / max(load_s, 1), 5.0
            else:
                index = min(int((t - load_s) // per_category), len(categories) - 1)
                phase, memory, util = f"generate:{categories[index]}", peak, device.mean_util_pct
            energy = "" if energy_total is None else f"{energy_total * t / run.wall_s:.3f}"
            power = "" if energy_total is None else f"{energy_total / run.wall_s:.1f}"
            rows.append(
                f"{t},{device.host},{device.device},{phase},{memory:.3f},80,{util},"
                f"{util / 2},60,{power},1980,{energy}"
            )
    return "\n".join(rows) + "\n"
