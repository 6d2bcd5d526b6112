"""Run directories → pandas frames: one row per run, per sample score, per job, per device.

A sharded run (RUN_DIR/shards/<i>/, one SLURM array task each) is read as one run: its shards'
samples are merged by key (task, sample_id) with any already-merged RUN_DIR/samples.jsonl, so
a report never depends on `evalpipe merge` having run and never counts a shard as a run.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from evalpipe.core.errors import DamagedFileError, RunDirError
from evalpipe.core.isolation import weakest
from evalpipe.monitor import DeviceSummary, device_summaries
from evalpipe.planning.ladderlog import ladder_quantization
from evalpipe.records.device import REMOTE_DEVICE
from evalpipe.reports.readers import METRICS_COLUMNS, read_metrics
from evalpipe.rundir.layout import SCHEMA, RunDir
from evalpipe.rundir.manifest import Manifest, read_manifest
from evalpipe.rundir.occupancy import SUMS
from evalpipe.rundir.samplelog import SampleRecord, read_samples, refusal_counts
from evalpipe.rundir.submission import read_submission
from evalpipe.rundir.summary import MetricSummary, Summary, read_summary

# The most telling status of a run's jobs when the run is not complete.
_STATUS_ORDER = ("failed", "interrupted", "running")


@dataclass(frozen=True, kw_only=True)
class RunSet:
    """Everything the report needs from a set of run directories, as frames keyed by `run`.

    runs: run (the directory, the key), run_id, preset, parts (its jobs' directories), status,
        complete, shards, shards_expected, n_done, n_total (samples finished / planned).
    samples: run, task, category, sample_id, metric, score, primary (the task's first metric).
    totals: run, task, category, n_total (samples the task should have in this run).
    summary_scores: run, kind ("task" | "category"), group, metric, mean, stderr, n, ci_low,
    ci_high — from
        summary.json, used only for runs without any samples.jsonl.
    jobs: run, shard, wall_s, generated_tokens, prompt_tokens, tokens_per_s, generate_s, gpus.
    devices: run, shard, host, device, name, peak_memory_gib, mean_util_pct, energy_j.
    cut_offs: run, task, completions, cut_off — per task of a reasoning model's run, its
        completions and those that ended inside their reasoning (scored as unanswered).
    refusals: run, task, reason, samples, refused — per task with samples the engine refused
        (a prompt longer than its context, …; scored 0), by reason.
    """

    runs: pd.DataFrame
    samples: pd.DataFrame
    totals: pd.DataFrame
    summary_scores: pd.DataFrame
    jobs: pd.DataFrame
    devices: pd.DataFrame
    cut_offs: pd.DataFrame
    refusals: pd.DataFrame
    warnings: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class _Part:
    """One job's run directory: the run itself, or one of its shards."""

    path: Path
    shard: int | None
    manifest: Manifest | None
    summary: Summary | None
    samples: list[SampleRecord]


def _read_part(path: Path, shard: int | None, warnings: list[str]) -> _Part:
    """One job's files; a damaged one becomes a warning (an unreadable one stays an error:
    the report would silently lack it)."""
    files = RunDir(path)
    try:
        manifest = read_manifest(files)
    except DamagedFileError as exc:
        warnings.append(f"{exc} It is left out; the run's other files are read.")
        manifest = None
    try:
        summary = read_summary(files)
    except DamagedFileError as exc:
        warnings.append(f"{exc} Ignored it.")
        summary = None
    if summary is not None and summary.schema != SCHEMA:
        schema = summary.schema
        age = "newer" if schema is not None and schema > SCHEMA else "older or unknown"
        warnings.append(
            f"{files.summary}: schema {schema!r} is {age} (this evalpipe reads schema {SCHEMA}); "
            "reporting the fields it recognises."
        )
    samples = read_samples(files.samples)
    warnings.extend(samples.warnings())
    return _Part(
        path=path, shard=shard, manifest=manifest, summary=summary, samples=samples.records
    )


def _number(value: float | None) -> float:
    """NaN for a figure the file does not give."""
    return float("nan") if value is None else value


def _expected_shards(parts: Sequence[_Part]) -> int:
    """N from a shard's manifest config.shard "i/N"; 0 when no part says."""
    for part in parts:
        shard = part.manifest.config.shard_of() if part.manifest else None
        if shard is not None:
            return shard.count
    return 0


def _part_complete(part: _Part) -> bool:
    if part.manifest is not None:
        return part.manifest.status == "complete"
    return part.summary is not None and part.summary.complete


def _status(parts: Sequence[_Part], complete: bool) -> str:
    if complete:
        return "complete"
    statuses = {p.manifest.status for p in parts if p.manifest}
    return next((s for s in _STATUS_ORDER if s in statuses), "incomplete")


class _Columns:
    """Column-wise accumulators: one DataFrame per table at the end, not one per run."""

    def __init__(self, *names: str) -> None:
        self.data: dict[str, list[Any]] = {name: [] for name in names}

    def add(self, **row: Any) -> None:
        for name, column in self.data.items():
            column.append(row[name])

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.data)


# What `evalpipe submit` predicted (submission.json's estimate): per-job wall and all GPU-hours.
PREDICTED = tuple(
    f"predicted_{figure}_{end}"
    for figure in ("wall_s", "gpu_hours")
    for end in ("low", "mid", "high")
)


def _predicted(run_dir: Path, warnings: list[str]) -> dict[str, float]:
    """The run's predicted wall and GPU-hours; NaN where it was submitted without an estimate."""
    files = RunDir(run_dir)
    record = None
    if files.submission.is_file():
        try:
            record = read_submission(files)
        except DamagedFileError as exc:
            warnings.append(f"{exc} Ignored it.")
    out = {}
    for figure in ("wall_s", "gpu_hours"):
        span = record.predicted(figure) if record else None
        for end in ("low", "mid", "high"):
            out[f"predicted_{figure}_{end}"] = math.nan if span is None else getattr(span, end)
    return out


# The columns of each RunSet frame, filled row by row and turned into frames once at the end.
_COLUMNS = {
    "runs": (
        "run", "run_id", "preset", "parts", "status", "complete", "shards", "shards_expected",
        "n_done", "n_total", "ladder_quantization", "sandbox", *PREDICTED,
    ),
    "samples": ("run", "task", "category", "sample_id", "metric", "score", "primary"),
    "totals": ("run", "task", "category", "n_total"),
    "summary_scores": (
        "run", "kind", "group", "metric", "mean", "stderr", "n", "ci_low", "ci_high",
    ),
    "jobs": (
        "run", "shard", "wall_s", "generated_tokens", "prompt_tokens", "tokens_per_s",
        "generate_s", "gpus", *SUMS,
    ),
    "devices": (
        "run", "shard", "host", "device", "name", "peak_memory_gib", "mean_util_pct", "energy_j",
    ),
    "cut_offs": ("run", "task", "completions", "cut_off"),
    "refusals": ("run", "task", "reason", "samples", "refused"),
}  # fmt: skip
# Declared so that empty frames keep usable types (a boolean mask must stay boolean).
_DTYPES = {
    "runs": {"complete": bool, "n_done": int, "n_total": int, "shards": int}
    | {name: float for name in PREDICTED},
    "samples": {"primary": bool},
    "totals": {"n_total": int},
    "summary_scores": {
        "mean": float,
        "stderr": float,
        "n": float,
        "ci_low": float,
        "ci_high": float,
    },
    "jobs": {"wall_s": float, "generated_tokens": float, "tokens_per_s": float, "gpus": int}
    | {name: float for name in SUMS},
    "devices": {"device": str, "peak_memory_gib": float, "energy_j": float},
    "cut_offs": {"completions": int, "cut_off": int},
    "refusals": {"samples": int, "refused": int},
}


def load_runs(run_dirs: Sequence[Path]) -> RunSet:
    """Read every run directory (see RunSet); damaged files become warnings, not failures."""
    warnings: list[str] = []
    tables = {name: _Columns(*columns) for name, columns in _COLUMNS.items()}
    for run_dir in run_dirs:
        _load_run(run_dir, tables, warnings)
    frames = {name: table.frame().astype(_DTYPES[name]) for name, table in tables.items()}
    # Scores as written: numbers, or null / junk, which become NaN (not counted in n).
    frames["samples"]["score"] = pd.to_numeric(frames["samples"]["score"], errors="coerce").astype(
        float
    )
    return RunSet(**frames, warnings=tuple(warnings))


def _load_run(run_dir: Path, tables: dict[str, _Columns], warnings: list[str]) -> None:
    run = str(run_dir)
    top = _read_part(run_dir, None, warnings)
    shards = [_read_part(d.path, int(d.name), warnings) for d in RunDir(run_dir).shard_dirs()]
    # Shards are the source of truth for a sharded run; RUN_DIR's own files were merged from
    # them (or hold what an earlier merge saw), so they only add samples and totals.
    jobs_parts = shards or [top]
    expected = _expected_shards(shards)
    if shards and expected and len(shards) < expected:
        missing = sorted(set(range(expected)) - {p.shard for p in shards})
        warnings.append(
            f"{run_dir}: shard(s) {', '.join(map(str, missing))} of {expected} have no run "
            "files yet; the run is reported as incomplete."
        )

    merged: dict[tuple[str, str], SampleRecord] = {}
    for part in [top, *shards]:
        for record in part.samples:
            merged[record.key] = record
    _add_samples(tables["samples"], run, merged)
    _add_cut_offs(tables["cut_offs"], run, merged.values())
    _add_refusals(tables["refusals"], run, merged.values())

    task_totals = _task_totals([top], warnings)
    for task, (category, n) in _task_totals(shards, warnings).items():
        if n > task_totals.get(task, ("", 0))[1]:
            task_totals[task] = (category, n)
    for task, (category, n) in task_totals.items():
        tables["totals"].add(run=run, task=task, category=category, n_total=n)

    if not merged:
        summary = top.summary or (shards[0].summary if len(shards) == 1 else None)
        _add_summary_scores(tables["summary_scores"], run, summary)
        source = "scores and their CI come from summary.json" if summary else "no scores"
        warnings.append(f"{run_dir}: no finished samples in samples.jsonl; {source}.")

    for part in jobs_parts:
        _add_job(tables["jobs"], tables["devices"], run, part, warnings)

    n_total = sum(n for _, n in task_totals.values())
    n_done = len(merged) if merged else _summary_done(top, shards)
    jobs_say_complete = all(_part_complete(p) and p.summary is not None for p in jobs_parts)
    if jobs_say_complete and n_done < n_total:
        warnings.append(
            f"{run_dir}: marked complete but holds {n_done} of {n_total} samples (lines lost "
            "from samples.jsonl?); reported as incomplete."
        )
    complete = (
        jobs_say_complete
        and (not expected or len(shards) >= expected)
        and n_total > 0
        and n_done >= n_total
    )
    manifest = top.manifest or next((p.manifest for p in shards if p.manifest), None)
    summary = top.summary or next((p.summary for p in shards if p.summary), None)
    preset_name = manifest.preset_name if manifest else None
    tables["runs"].add(
        run=run,
        run_id=top.manifest.run_id if top.manifest else run_dir.name,
        preset=str(preset_name or (summary.preset if summary else None) or "?"),
        parts=tuple(str(p.path) for p in jobs_parts),
        status=_status(jobs_parts, complete),
        complete=complete,
        shards=len(shards),
        shards_expected=expected,
        n_done=n_done,
        n_total=n_total,
        ladder_quantization=_ladder_quantization([top, *shards]),
        sandbox=weakest(p.manifest.sandbox for p in (top, *shards) if p.manifest),
        **_predicted(run_dir, warnings),
    )


def _ladder_quantization(parts: Sequence[_Part]) -> str | None:
    """The weight format the OOM ladder chose in any part (its scores are not full precision)."""
    for part in parts:
        if part.manifest and (found := ladder_quantization(part.manifest.oom_fallback)):
            return found
    return None


def _add_samples(out: _Columns, run: str, merged: dict[tuple[str, str], SampleRecord]) -> None:
    """One row per sample and metric; `primary` marks the first metric its task records."""
    primary: dict[str, str] = {}
    rows: list[tuple[Any, ...]] = []
    append = rows.append
    for (task, sample_id), record in merged.items():
        scores = record.scores
        if task not in primary:
            primary[task] = next(iter(scores), "")
        first = primary[task]
        category = record.category
        for metric, score in scores.items():
            append((task, category, sample_id, metric, score, metric == first))
    if not rows:
        return
    # Column-wise extends: this loop runs once per sample of every run, so it stays lean.
    out.data["run"].extend([run] * len(rows))
    for name, column in zip(_COLUMNS["samples"][1:], zip(*rows, strict=True), strict=True):
        out.data[name].extend(column)


def _add_cut_offs(out: _Columns, run: str, records: Iterable[SampleRecord]) -> None:
    """Per task whose completions carry reasoning: how many ended inside it."""
    counts: dict[str, tuple[int, int]] = {}
    for record in records:
        if any(record.reasoning):
            done, cut = counts.get(record.task, (0, 0))
            counts[record.task] = (done + len(record.completions), cut + sum(record.cut_off))
    for task, (completions, cut_off) in counts.items():
        out.add(run=run, task=task, completions=completions, cut_off=cut_off)


def _add_refusals(out: _Columns, run: str, records: Iterable[SampleRecord]) -> None:
    """Per task with refused samples: how many, by reason, of the task's samples."""
    by_task: dict[str, list[SampleRecord]] = {}
    for record in records:
        by_task.setdefault(record.task, []).append(record)
    for task, done in by_task.items():
        for reason, refused in refusal_counts(done).items():
            out.add(run=run, task=task, reason=reason, samples=len(done), refused=refused)


def _planned(part: _Part) -> list[tuple[str, str, Any]]:
    """(task, category, n_total) per task: from summary.json, else the manifest's plan.

    A run killed before its first summary still says in its manifest what it set out to do.
    """
    tasks = part.summary.tasks if part.summary else {}
    if tasks:
        return [(task, info.category, info.n_total) for task, info in tasks.items()]
    planned = part.manifest.samples_planned if part.manifest else []
    return [(p.name, p.category, p.n_total) for p in planned]


def _task_totals(parts: Sequence[_Part], warnings: list[str]) -> dict[str, tuple[str, int]]:
    """task → (category, n_total) summed over the parts."""
    out: dict[str, tuple[str, int]] = {}
    for part in parts:
        for task, category, n in _planned(part):
            if not isinstance(n, int):
                warnings.append(f"{part.path}: task {task!r} has no n_total; its total is unknown.")
                continue
            category, before = out.get(task, (category, 0))
            out[task] = (category, before + n)
    return out


def _summary_done(top: _Part, shards: Sequence[_Part]) -> int:
    """Finished samples by the summaries, for runs without any samples.jsonl records."""
    counts = [p.summary.n_done if p.summary else None for p in shards or [top]]
    return sum(n for n in counts if n is not None)


def _add_summary_scores(out: _Columns, run: str, summary: Summary | None) -> None:
    if summary is None:
        return
    groups = [("task", name, info.metrics) for name, info in summary.tasks.items()] + [
        ("category", name, category.micro) for name, category in summary.categories.items()
    ]
    for kind, group, metrics in groups:
        first = next(iter(metrics.items()), None)  # the primary metric
        if first is None:
            continue
        metric, values = first
        _add_score(out, run, kind, group, metric, values)


def _add_score(
    out: _Columns, run: str, kind: str, group: str, metric: str, values: MetricSummary
) -> None:
    out.add(
        run=run, kind=kind, group=group, metric=metric, mean=_number(values.mean),
        stderr=_number(values.stderr), n=_number(values.n), ci_low=_number(values.ci_low),
        ci_high=_number(values.ci_high),
    )  # fmt: skip


def _add_job(jobs: _Columns, devices: _Columns, run: str, part: _Part, warnings: list[str]) -> None:
    summary = part.summary or Summary()
    throughput = summary.throughput
    device_rows = summary.devices or _devices_from_metrics(part, warnings)
    gpus = throughput.gpus
    if gpus is None and part.manifest and part.manifest.plan:
        gpus = part.manifest.plan.total_gpus
    if gpus is None:
        gpus = sum(d.is_gpu for d in device_rows)
    tokens = _number(throughput.generated_tokens)
    rate = _number(throughput.tokens_per_s)
    generate_s = _number(throughput.generate_s)
    if rate > 0 and tokens == tokens:
        generate_s = tokens / rate  # the time the runner's own rate was measured over
    jobs.add(
        run=run, shard=part.shard, wall_s=_number(throughput.wall_s), generated_tokens=tokens,
        prompt_tokens=_number(throughput.prompt_tokens), tokens_per_s=rate,
        generate_s=generate_s, gpus=gpus,
        **{name: _number(getattr(summary.occupancy, name, None)) for name in SUMS},
    )  # fmt: skip
    # A run against a server (--backend openai) with no GPU here: the CPU readings are the
    # client's, not the model's, so the run shows as "remote" with nothing measured.
    remote = _remote(part) and not any(d.is_gpu for d in device_rows)
    for d in device_rows:
        if remote:
            devices.add(
                run=run, shard=part.shard, host=d.host, device=REMOTE_DEVICE, name=REMOTE_DEVICE,
                peak_memory_gib=math.nan, mean_util_pct=math.nan, energy_j=math.nan,
            )  # fmt: skip
            continue
        devices.add(
            run=run, shard=part.shard, host=d.host, device=d.device, name=d.name or "",
            peak_memory_gib=_number(d.peak_memory_gib), mean_util_pct=_number(d.mean_util_pct),
            energy_j=_number(d.energy_j),
        )  # fmt: skip


def _remote(part: _Part) -> bool:
    """Whether the part's engine ran elsewhere (its description says device "remote")."""
    return part.manifest is not None and part.manifest.engine_device == REMOTE_DEVICE


def _read_all_metrics(part: Path, warnings: list[str]) -> pd.DataFrame | None:
    files = RunDir(part).metrics_files()
    frames = [f for f in (read_metrics(p, warnings) for p in files) if f is not None]
    return pd.concat(frames, ignore_index=True) if frames else None


def _devices_from_metrics(part: _Part, warnings: list[str]) -> list[DeviceSummary]:
    """Per-device peaks, mean utilisation and energy from the metrics files when summary.json
    lacks them, summarised as the monitor summarises them."""
    files = RunDir(part.path).metrics_files()
    if not files:
        if part.summary is not None:
            warnings.append(
                f"{part.path}: no device figures (summary.json lists no devices and there is "
                "no metrics.csv); memory, utilisation and energy are left blank."
            )
        return []
    try:
        return device_summaries(files)
    except OSError as exc:
        raise RunDirError(f"Cannot read {str(exc.filename)!r}: {exc.strerror}.") from exc
    except (UnicodeDecodeError, csv.Error) as exc:
        warnings.append(f"{part.path}: a metrics file is not readable as CSV ({exc}); ignored.")
        return []


def load_metrics(runs: pd.DataFrame) -> tuple[pd.DataFrame, tuple[str, ...]]:
    """The monitor time series of the given runs (every node's file): metrics.csv columns plus
    run and shard."""
    warnings: list[str] = []
    frames = []
    for run, parts in zip(runs["run"], runs["parts"], strict=True):
        for part in map(Path, parts):
            if not RunDir(part).metrics_files():
                warnings.append(f"{part}: no metrics.csv; no memory or utilisation curves.")
            frame = _read_all_metrics(part, warnings)
            if frame is None:
                continue
            shard = part.name if RunDir(part).is_shard else None
            frames.append(frame.assign(run=run, shard=shard))
    if not frames:
        return pd.DataFrame(columns=["run", "shard", *METRICS_COLUMNS]), tuple(warnings)
    return pd.concat(frames, ignore_index=True), tuple(warnings)
