"""What a run directory tells an experiment tracker (W&B, MLflow), as flat names and values:
the parameters from the manifest, the figures from summary.json, a capped table of samples and
the name that groups the tracked runs of one sweep or one sharded job.

Pure: the tracking phase (evalpipe.run.tracking) and `evalpipe report --export` both log what
these functions return, so a run tracked live and one exported later carry the same names.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from evalpipe.rundir.judgments import JudgeDefinition, JudgeSummary
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.manifest import Manifest
from evalpipe.rundir.samplelog import SampleRecord
from evalpipe.rundir.summary import MetricSummary, Summary
from evalpipe.rundir.sweep import SWEEP_MANIFEST

# MLflow's limits: a parameter's value (longer ones are cut) and a name's characters.
PARAM_CHARS = 6000
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_\-. /:]")
SAMPLE_ROWS = 100  # the samples table's cap: enough to read examples, small enough to upload
TEXT_CHARS = 2000  # a prompt or completion in the table is cut here
SAMPLE_COLUMNS = ("task", "sample_id", "prompt", "completion", "extracted", "score")


def name(*parts: str) -> str:
    """A metric or parameter name both trackers accept: parts joined with '/'."""
    return _NAME_UNSAFE.sub("_", "/".join(parts))


def _flat(prefix: str, value: Any, out: dict[str, str]) -> None:
    if isinstance(value, Mapping):
        for key, item in value.items():
            _flat(f"{prefix}.{key}" if prefix else str(key), item, out)
    elif value is not None:
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        out[_NAME_UNSAFE.sub("_", prefix)] = text[:PARAM_CHARS]


def tracked_params(manifest: Manifest) -> dict[str, str]:
    """The run's configuration as dotted names: identity (run id, config hash, git sha, the
    SLURM ids of the attempt that started the tracked run), preset, model, layout, sampling per
    task, task definitions, package versions and the submitted plan. None values are left out."""
    out: dict[str, str] = {}
    _flat(
        "",
        {
            "run_id": manifest.run_id,
            "config_hash": manifest.config_hash,
            "git_sha": manifest.git_sha,
            "seed": manifest.seed,
            "slurm": manifest.slurm,
            "config": manifest.config.to_dict(),
            "versions": manifest.versions,
            "plan": None if manifest.plan is None else manifest.plan.to_dict(),
        },
        out,
    )
    return out


def _stats(prefix: str, stats: MetricSummary) -> dict[str, float]:
    # NAME.stderr, not NAME/stderr: MLflow's file store keeps NAME as a file, so no other name
    # may continue it as a folder.
    out = {prefix: stats.mean}
    for key in ("stderr", "ci_low", "ci_high", "n"):
        out[f"{prefix}.{key}"] = getattr(stats, key)
    return {k: v for k, v in out.items() if v is not None and math.isfinite(v)}


def judge_metrics(judges: Mapping[str, JudgeSummary]) -> dict[str, float]:
    """Each judge's figures (its summary.json, by fingerprint): judgments, parse failures and
    their rate, the overall and per-task means, ratings out of range, judgments cut off inside
    the judge's reasoning, judgments the judge's engine refused by reason, how many judgments
    gave each score, and per pairwise task its score, interval, win rate and position
    inconsistency."""
    out: dict[str, float] = {}
    for fingerprint, summary in judges.items():
        prefix = name("judge", fingerprint[:8])
        figures: dict[str, float | None] = {
            f"{prefix}/judgments": summary.judgments,
            f"{prefix}/parse_failures": summary.parse_failures,
            f"{prefix}/parse_failure_rate": summary.parse_failure_rate,
            f"{prefix}/overall": summary.overall,
            f"{prefix}/out_of_range": summary.out_of_range,
            f"{prefix}/cut_off_in_reasoning": summary.cut_off_in_reasoning,
        }
        for task, info in summary.tasks.items():
            figures[name(prefix, "task", task, "mean")] = info.mean
        for reason, count in summary.refused.items():
            figures[name(prefix, "refused", reason)] = count
        for score, count in summary.distribution.items():
            figures[name(prefix, "score", score)] = count
        for task, pair in summary.pairwise.items():
            arena = pair.arena
            for key in ("score", "lower", "upper", "win_rate"):
                figures[name(prefix, "pairwise", task, key)] = (
                    None if arena is None else getattr(arena, key)
                )
            figures[name(prefix, "pairwise", task, "position_inconsistency")] = pair.position.rate
        out |= {k: float(v) for k, v in figures.items() if v is not None}
    return out


def judge_params(judges: Mapping[str, JudgeDefinition]) -> dict[str, str]:
    """Each judge's identity and settings (its definition, by fingerprint), under
    judge/FINGERPRINT."""
    out: dict[str, str] = {}
    for fingerprint, judge in judges.items():
        _flat(name("judge", fingerprint[:8]), judge.to_dict(), out)
    return out


def tracked_metrics(summary: Summary) -> dict[str, float]:
    """The run's figures: each task's and category's (pooled) metrics with stderr, interval
    and n, and its samples the engine refused by reason; samples done; throughput; cost (wall,
    GPU-hours, energy) and each device's."""
    out: dict[str, float] = {}
    for task, info in summary.tasks.items():
        for metric, stats in info.metrics.items():
            out |= _stats(name("task", task, metric), stats)
        for reason, count in info.refused.items():
            out[name("task", task, "refused", reason)] = float(count)
    for category, figures in summary.categories.items():
        for metric, stats in figures.micro.items():
            out |= _stats(name("category", category, metric), stats)
    t = summary.throughput
    figures = {
        "samples/done": summary.n_done,
        "cost/wall_s": t.wall_s,
        "cost/gpus": t.gpus,
        "cost/gpu_hours": None if t.wall_s is None or t.gpus is None else t.wall_s * t.gpus / 3600,
        "cost/energy_j": _total(d.energy_j for d in summary.devices),
        "throughput/generate_s": t.generate_s,
        "throughput/prompt_tokens": t.prompt_tokens,
        "throughput/generated_tokens": t.generated_tokens,
        "throughput/tokens_per_s": t.tokens_per_s,
    }
    for d in summary.devices:
        prefix = name("device", d.host, d.device)
        figures |= {
            f"{prefix}/peak_memory_gib": d.peak_memory_gib,
            f"{prefix}/mean_util_pct": d.mean_util_pct,
            f"{prefix}/energy_j": d.energy_j,
        }
    out |= {k: float(v) for k, v in figures.items() if v is not None}
    return out


def _total(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return math.fsum(known) if known else None


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text[:TEXT_CHARS]


def sample_rows(records: Sequence[SampleRecord], cap: int = SAMPLE_ROWS) -> list[list[Any]]:
    """The first `cap` samples as SAMPLE_COLUMNS rows: the prompt, the first completion, its
    extracted answer and the record's first (primary) score."""
    rows = []
    for r in records[:cap]:
        score = next(iter(r.scores.values()), None)
        rows.append(
            [
                r.task,
                r.sample_id,
                _text(r.prompt),
                _text(r.completions[0]) if r.completions else "",
                (r.extracted[0] if r.extracted else None) or "",
                score,
            ]
        )
    return rows


def tracking_group(files: RunDir) -> str:
    """What groups tracked runs: a shard's run directory above shards/, a sweep's folder, else
    the run's own name."""
    if files.is_shard:
        return files.path.parent.parent.name
    if (files.path.parent / SWEEP_MANIFEST).is_file():
        return files.path.parent.name
    return files.path.name
