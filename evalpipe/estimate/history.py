"""What finished runs in a results folder say about future ones: each job's layout, device,
phase timings and energy, and per task the prompt and generated tokens it saw (plain JSON, no
pandas: estimates run on login nodes)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalpipe.catalog.gpus import Gpu
from evalpipe.core.errors import RunDirError
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.manifest import Manifest, read_manifest
from evalpipe.rundir.pilotrecord import Probe
from evalpipe.rundir.samplelog import read_samples
from evalpipe.rundir.stepprofile import StepProfile
from evalpipe.rundir.timings import PROBE, Timings

_FAMILY = re.compile(r"[a-z]+[0-9.]*")


def family(model: str) -> str:
    """A model's family from its id: the leading name of its last path part, lowercased
    ("meta-llama/Llama-3.3-70B-Instruct" → "llama", "Qwen/Qwen2.5-72B" → "qwen2.5")."""
    name = model.rstrip("/").rsplit("/", 1)[-1].lower()
    found = _FAMILY.match(name)
    return found.group(0) if found else name


@dataclass(frozen=True, kw_only=True)
class TaskRecord:
    """One task as one finished job ran it."""

    task: str
    samples: int
    completions: int  # generated sequences (n per sample); 0 for ranked options only
    prompt_tokens: int  # summed over samples
    generated_tokens: int  # summed over completions
    longest: int  # the longest completion, tokens
    ranked: int  # samples answered by ranking options (multiple choice by logprobs)
    category: str = ""
    # Seconds of scoring: the job's `score:<category>` time, shared among the category's tasks
    # by samples (timings are kept per category); 0 when the job did not record it.
    score_s: float = 0.0


@dataclass(frozen=True, kw_only=True)
class PastJob:
    """One finished job (a run, or one shard of a sharded run) and what it cost."""

    path: Path
    preset: str
    family: str
    gpu: str | None  # catalogue name; None when neither its plan nor its devices say
    tp: int
    pp: int
    replicas: int
    backend: str
    attempts: int
    load_s: float  # every attempt's model load
    generate_s: float
    score_s: float
    wall_s: float
    gpus: int  # GPUs the monitor saw in use (0 on the CPU)
    energy_j: float | None  # the GPUs' measured energy, None if not measured
    tasks: tuple[TaskRecord, ...]
    steps: StepProfile = field(default_factory=StepProfile)  # its decode steps by batch
    probe: Probe | None = None  # a pilot's batch probe (its steps are in `steps` too)
    probe_s: float = 0.0  # the probe's seconds (part of the wall, not of the run's work)

    @property
    def layout(self) -> tuple[int, int, int]:
        return (self.tp, self.pp, self.replicas)

    @property
    def overhead_s(self) -> float:
        """Wall time outside model loads, generation and a pilot's batch probe: interpreter,
        imports, tasks, writing."""
        return max(0.0, self.wall_s - self.load_s - self.generate_s - self.probe_s)


def _device_gpu(manifest: Manifest, gpus: Mapping[str, Gpu]) -> str | None:
    planned = manifest.plan.gpu if manifest.plan else None
    if planned in gpus:
        return planned
    devices = manifest.devices
    names = {d.name for d in devices if d.is_gpu}
    for gpu in gpus.values():
        if gpu.is_gpu and gpu.device_name in names:
            return gpu.name
    if devices and not names:  # the CPU engine: the catalogue's (first) cpu entry
        return next((g.name for g in gpus.values() if not g.is_gpu), None)
    return None


def _tasks(samples: Path, timings: Timings) -> tuple[TaskRecord, ...]:
    totals: dict[str, list[int]] = {}
    categories: dict[str, str] = {}
    try:
        records = read_samples(samples).records  # damaged lines are skipped
    except RunDirError:
        return ()
    for record in records:
        counts = record.completion_tokens
        ranked = bool(record.option_logprobs)
        categories.setdefault(record.task, record.category)
        t = totals.setdefault(record.task, [0, 0, 0, 0, 0, 0])
        t[0] += 1
        t[1] += 0 if ranked else len(counts)
        t[2] += record.prompt_tokens
        t[3] += 0 if ranked else sum(counts)
        t[4] = max(t[4], max(counts, default=0) if not ranked else 0)
        t[5] += ranked
    in_category: dict[str, int] = {}
    for task, counts in totals.items():
        in_category[categories[task]] = in_category.get(categories[task], 0) + counts[0]
    return tuple(
        TaskRecord(
            task=task,
            samples=n,
            completions=c,
            prompt_tokens=p,
            generated_tokens=g,
            longest=m,
            ranked=r,
            category=categories[task],
            score_s=timings.of("score", categories[task]) * n / in_category[categories[task]],
        )
        for task, (n, c, p, g, m, r) in totals.items()
    )


def _job(part: RunDir, gpus: Mapping[str, Gpu]) -> PastJob | None:
    try:
        manifest = read_manifest(part)
    except RunDirError:  # unreadable or damaged: a past job that cannot inform an estimate
        return None
    if manifest is None or manifest.status != "complete" or not manifest.attempts:
        return None
    config = manifest.config
    timings = manifest.phase_timings
    energy = [d.energy_j for d in manifest.devices if d.is_gpu]
    probe = manifest.pilot.probe if manifest.pilot else None
    return PastJob(
        path=part.path,
        preset=manifest.preset_name,
        family=family(manifest.model),
        gpu=_device_gpu(manifest, gpus),
        tp=config.tensor_parallel_size,
        pp=config.pipeline_parallel_size,
        replicas=config.replicas,
        backend=config.backend,
        attempts=len(manifest.attempts),
        load_s=timings.load_s,
        generate_s=timings.total_s("generate"),
        score_s=timings.total_s("score"),
        wall_s=manifest.wall_s,
        gpus=len(energy),
        energy_j=math.fsum(e for e in energy if e is not None)
        if energy and None not in energy
        else None,
        tasks=_tasks(part.samples, timings),
        # A pilot's batch probe: decode steps at the full run's batch, beside the pilot's own.
        steps=StepProfile.merged([manifest.occupancy.steps, *([probe.steps] if probe else [])]),
        probe=probe,
        probe_s=timings.seconds.get(PROBE, 0.0),
    )


def load_history(folders: Iterable[Path], gpus: Mapping[str, Gpu]) -> list[PastJob]:
    """Every complete job under `folders` (runs, and the shards of sharded runs); folders that
    do not exist hold nothing."""
    from evalpipe.rundir.discover import find_run_dirs  # plain os.scandir, no pandas

    jobs: list[PastJob] = []
    for folder in folders:
        try:
            runs = find_run_dirs([folder])
        except RunDirError:
            continue
        for run in runs:
            parts = RunDir(run).shard_dirs() or [RunDir(run)]
            jobs += [job for job in (_job(p, gpus) for p in parts) if job is not None]
    return jobs


def task_lengths(
    jobs: Iterable[PastJob], task: str, preset: str, model_family: str
) -> tuple[str, list[TaskRecord]]:
    """Records of `task` from jobs of the same preset, else of the same model family:
    ("preset" | "family" | "", the records)."""
    jobs = [j for j in jobs if j.backend == "vllm"]  # the fake engine's answers say nothing
    for scope, match in (
        ("preset", lambda j: j.preset == preset),
        ("family", lambda j: j.family == model_family),
    ):
        found = [t for j in jobs if match(j) for t in j.tasks if t.task == task]
        if found:
            return scope, found
    return "", []


def to_json(jobs: Iterable[PastJob]) -> list[dict[str, Any]]:
    """The jobs an estimate was calibrated on, by path (for the submission record)."""
    return [{"path": str(j.path), "preset": j.preset, "gpu": j.gpu} for j in jobs]
