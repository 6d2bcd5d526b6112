"""How long each sample's completion will be, from the lengths past runs recorded for it.

Best first: the same sample id's completion lengths in past runs of the same task (any preset,
scaled by the ratio of the two presets' mean lengths on the task where both ran); else the
task's past mean length; else the task's max_tokens. The runner admits the longest predicted
completions first (evalpipe.run.admission), so they do not finish alone in a nearly empty batch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from evalpipe.core.errors import RunDirError
from evalpipe.rundir.discover import find_run_dirs
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.manifest import read_manifest
from evalpipe.rundir.samplelog import read_samples

# Where a prediction came from, best first.
Basis = Literal["sample", "task", "max_tokens"]
BASES: tuple[Basis, ...] = ("sample", "task", "max_tokens")


@dataclass(frozen=True, kw_only=True)
class PastLengths:
    """One past run (or shard): per task, per sample id, its completions' mean length in tokens
    (`tasks`) and its prompt's length in tokens (`prompts`, where recorded)."""

    run: str  # the run directory
    preset: str
    backend: str
    tasks: dict[str, dict[str, float]]
    prompts: dict[str, dict[str, int]] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Predicted:
    tokens: float
    basis: Basis


def _mean(values: Iterable[float]) -> float | None:
    values = list(values)
    return math.fsum(values) / len(values) if values else None


class LengthModel:
    """Predictions for one preset from past runs (pure: the runs are passed in)."""

    def __init__(self, past: Sequence[PastLengths], preset: str) -> None:
        self.preset = preset
        self.sources = tuple(p.run for p in past)
        # (preset, task) → mean completion length over its runs' samples
        pooled: dict[tuple[str, str], list[float]] = {}
        for run in past:
            for task, samples in run.tasks.items():
                pooled.setdefault((run.preset, task), []).extend(samples.values())
        self._means = {key: _mean(v) or 0.0 for key, v in pooled.items()}
        self._task_means = {
            task: _mean(v for (_, t), vs in pooled.items() if t == task for v in vs)
            for _, task in pooled
        }
        self._prompts = {
            (task, sample_id): tokens
            for run in past
            for task, samples in run.prompts.items()
            for sample_id, tokens in samples.items()
        }
        self._by_sample: dict[tuple[str, str], list[float]] = {}
        for run in past:
            for task, samples in run.tasks.items():
                scale = self._scale(run.preset, task)
                for sample_id, tokens in samples.items():
                    self._by_sample.setdefault((task, sample_id), []).append(tokens * scale)

    def _scale(self, other: str, task: str) -> float:
        """Lengths of `other` on `task` in this preset's terms: the ratio of their means where
        both ran the task, else 1."""
        mine, theirs = self._means.get((self.preset, task)), self._means.get((other, task))
        return mine / theirs if mine is not None and theirs else 1.0

    def predict(self, task: str, sample_id: str, max_tokens: int) -> Predicted:
        seen = self._by_sample.get((task, sample_id))
        if seen:
            return Predicted(tokens=math.fsum(seen) / len(seen), basis="sample")
        mean = self._means.get((self.preset, task), self._task_means.get(task))
        if mean is not None:
            return Predicted(tokens=mean, basis="task")
        return Predicted(tokens=float(max_tokens), basis="max_tokens")

    def prompt_tokens(self, task: str, sample_id: str) -> int | None:
        """The sample's prompt length in tokens as a past run recorded it; None if none did."""
        return self._prompts.get((task, sample_id))


def _run_lengths(part: RunDir) -> PastLengths | None:
    try:
        manifest = read_manifest(part)
        if manifest is None:
            return None
        records = read_samples(part.samples).records if part.samples.exists() else []
    except RunDirError:  # damaged or unreadable: a past run that cannot inform a prediction
        return None
    tasks: dict[str, dict[str, float]] = {}
    prompts: dict[str, dict[str, int]] = {}
    for record in records:
        if record.option_logprobs or not record.completion_tokens:  # ranked, nothing generated
            continue
        counts = record.completion_tokens
        tasks.setdefault(record.task, {})[record.sample_id] = sum(counts) / len(counts)
        prompts.setdefault(record.task, {})[record.sample_id] = record.prompt_tokens
    if not tasks:
        return None
    return PastLengths(
        run=str(part.path),
        preset=manifest.preset_name,
        backend=manifest.config.backend,
        tasks=tasks,
        prompts=prompts,
    )


def load_lengths(folders: Iterable[Path], *, exclude: Path | None = None) -> list[PastLengths]:
    """Every run (and shard) under `folders` that generated something, but `exclude` (the run
    itself); folders that do not exist hold nothing."""
    found: list[PastLengths] = []
    skip = exclude.resolve() if exclude is not None else None
    for folder in dict.fromkeys(folders):
        try:
            runs = find_run_dirs([folder])
        except RunDirError:
            continue
        for run in runs:
            if run.resolve() == skip:
                continue
            parts = RunDir(run).shard_dirs() or [RunDir(run)]
            found += [p for p in (_run_lengths(part) for part in parts) if p is not None]
    return found
