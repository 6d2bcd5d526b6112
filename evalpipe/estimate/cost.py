"""Cost estimate of one job layout: model load, generation, scoring and wall time per shard and
in all, GPU-hours and energy, each as a low–expected–high span, and what it was calibrated on.

Pure: the work (estimate/workmodel.py), the rates (estimate/throughput.py), smoke records and
past jobs come in as values. docs/planner.md ("Estimates") gives every constant's source.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from evalpipe.catalog.gpus import Gpu
from evalpipe.catalog.pilot import default_size
from evalpipe.catalog.preset import Preset
from evalpipe.core.span import Span, fmt_span, total
from evalpipe.core.textable import format_table
from evalpipe.estimate.calibration import Calibration
from evalpipe.estimate.history import PastJob, TaskRecord
from evalpipe.estimate.stepfit import fit_steps
from evalpipe.estimate.throughput import Rates, from_smoke, from_steps, per_token, roofline
from evalpipe.estimate.workmodel import TaskWork
from evalpipe.planning.memory import GIB
from evalpipe.planning.planner import Plan
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.stepprofile import StepProfile

SCHEMA = 1
# What a vLLM engine achieves of the roofline (time = roofline time / share): the bound itself,
# then the share published vLLM figures reach (BENCHMARKS.md, "Estimates on paper").
ROOFLINE_SHARE = Span(0.35, 0.6, 1.0)
# A calibration's own spread, as time factors: repeated runs on a shared node vary this much.
CALIBRATED = Span(0.85, 1.0, 1.25)
# Uncalibrated start-up (docs/planner.md): importing vLLM, reading the weights from the file
# system, then profiling, KV allocation and CUDA-graph capture (vLLM #19824: 3.5 min to the first
# token for a 70B FP8 at TP=8), plus worker start-up when several GPUs serve one replica.
IMPORT_S = Span(5.0, 10.0, 20.0)
READ_GBS = Span(1.0, 2.0, 4.0)  # GB/s from shared storage: the high end gives the low time
ENGINE_INIT_S = Span(15.0, 30.0, 90.0)
ENGINE_INIT_EAGER_S = Span(2.0, 5.0, 15.0)
WORKERS_S = Span(5.0, 15.0, 30.0)
# The run's own process outside the load and generation: interpreter, imports, tasks, manifest,
# summary (BENCHMARKS.md §1: 3.9 s on the 2-core VM).
RUN_OVERHEAD_S = Span(3.0, 5.0, 15.0)
ENDS = ("low", "mid", "high")


@dataclass(frozen=True, kw_only=True)
class Basis:
    """What the estimate rests on: engine rates, start-up, and calibration corrections."""

    rates: Rates
    rate_factor: Span  # generation time = model time × this (roofline share, or calibration)
    load_s: Span  # one replica's start-up: vLLM import, weights, engine init
    overhead_s: Span
    power_w: Span | None  # per GPU
    power_measured: bool
    calibrated_on: tuple[str, ...]
    # Other rates at the estimate's low and high ends (a fitted line's slope interval).
    ends: dict[str, Rates] = field(default_factory=dict)

    @property
    def calibrated(self) -> bool:
        return bool(self.calibrated_on)

    def rates_at(self, end: str) -> Rates:
        return self.ends.get(end, self.rates)


def _end(span: Span, end: str) -> float:
    return float(getattr(span, end))


def generate_s(rates: Rates, tasks: Sequence[TaskWork], replicas: int, end: str) -> float:
    """One replica's generation time for its share of `tasks`, at span end `end`: the prefill
    of every prompt (at the task's mean prompt length: its attention share, which grows with the
    square, is then a lower bound where lengths spread), then the decode with the batch kept
    full across tasks (the streaming runner never drains it), then the longest sequence
    finishing alone; or, where one batch holds every sequence, as many steps as the longest
    answer, the batch emptying as the shorter ones end."""
    prefill = decode = streams = weighted_ctx = 0.0
    seq_peak = tail = longest = 0.0
    for t in tasks:
        prompt = _end(t.prompt_tokens, end)
        length = _end(t.generated_tokens, end)
        sequences = t.samples * max(1, t.completions)
        tokens = sequences * length
        prefill += t.samples * rates.prompt_s(prompt)  # the mean prompt's (see Rates.prompt_s)
        decode += tokens
        streams += sequences
        weighted_ctx += tokens * (prompt + length / 2)
        seq_peak = max(seq_peak, prompt + length)
        # The longest completion decodes its last steps alone, whichever end of the range the
        # mean is taken at: the range's high end is the longest seen (or max_tokens).
        tail = max(tail, t.generated_tokens.high - length if not t.ranked else 0.0)
        longest = max(longest, t.generated_tokens.high if not t.ranked else 0.0)
    if not streams:
        return 0.0
    share = 1.0 / replicas
    ctx = weighted_ctx / decode if decode else 0.0
    seconds = prefill * share
    tokens, sequences = decode * share, streams * share
    if tokens > 0 and rates.batch(sequences, seq_peak) >= sequences:
        # A task's tail below counts from its own mean; here every answer decodes beside the
        # longest (a pilot's short answers end while its long ones run on).
        steps = max(longest, tokens / sequences)
        return seconds + steps * rates.step_s(tokens / steps, ctx)
    seconds += rates.decode_s(tokens, sequences, ctx, seq_peak)
    seconds += tail * rates.step_s(1.0, ctx)
    return seconds


def _span(fn: Any) -> Span:
    low, mid, high = (fn(end) for end in ENDS)
    return Span(min(low, mid, high), sorted((low, mid, high))[1], max(low, mid, high))


@dataclass(frozen=True, kw_only=True)
class Estimate:
    """The predicted cost of running `tasks` as `shards` jobs of one plan's layout."""

    preset: str
    gpu: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    replicas: int
    gpus_per_job: int
    shards: int
    tasks: tuple[TaskWork, ...]  # the whole run's work
    load_s: Span  # per job
    generate_s: Span  # per job: its largest share of the work
    score_s: Span
    overhead_s: Span
    wall_s: Span  # per job, which is the whole run's with the shards side by side
    gpu_hours: Span  # every job's
    energy_kwh: Span | None
    energy_measured: bool
    basis: str
    calibrated_on: tuple[str, ...]
    notes: tuple[str, ...]

    @property
    def calibrated(self) -> bool:
        return bool(self.calibrated_on)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "preset": self.preset,
            "gpu": self.gpu,
            "tensor_parallel_size": self.tensor_parallel_size,
            "pipeline_parallel_size": self.pipeline_parallel_size,
            "replicas": self.replicas,
            "gpus_per_job": self.gpus_per_job,
            "shards": self.shards,
            "per_shard": {
                "load_s": self.load_s.to_dict(1),
                "generate_s": self.generate_s.to_dict(1),
                "score_s": self.score_s.to_dict(1),
                "overhead_s": self.overhead_s.to_dict(1),
                "wall_s": self.wall_s.to_dict(1),
            },
            "wall_s": self.wall_s.to_dict(1),
            "gpu_hours": self.gpu_hours.to_dict(4),
            "energy_kwh": None if self.energy_kwh is None else self.energy_kwh.to_dict(4),
            "energy_measured": self.energy_measured,
            "basis": self.basis,
            "calibrated": self.calibrated,
            "calibrated_on": list(self.calibrated_on),
            "tasks": [t.to_dict() for t in self.tasks],
            "notes": list(self.notes),
        }

    def describe(self) -> str:
        """The table `plan --estimate` and `submit --dry-run` print."""
        per = f"per shard (×{self.shards})" if self.shards > 1 else "per job"
        rows = [
            ("load (import, weights, engine)", fmt_span(self.load_s)),
            ("generation", fmt_span(self.generate_s)),
            ("scoring (overlaps generation)", fmt_span(self.score_s)),
            ("other (process, tasks, writing)", fmt_span(self.overhead_s)),
            (f"wall {per}", fmt_span(self.wall_s)),
            ("wall in all (shards side by side)", fmt_span(self.wall_s)),
            ("GPU-hours", fmt_span(self.gpu_hours, lambda h: f"{h:.3g}")),
        ]
        if self.energy_kwh is not None:
            how = "measured power" if self.energy_measured else "board power × time"
            rows.append((f"energy ({how})", fmt_span(self.energy_kwh, lambda e: f"{e:.3g} kWh")))
        work = format_table(
            ("task", "samples", "prompt tok", "generated tok", "source"),
            [
                (
                    t.task,
                    t.samples,
                    f"{t.prompt_tokens.mid:.0f}",
                    "ranked" if t.ranked else f"{t.generated_tokens.mid:.0f} × {t.completions}",
                    "; ".join(t.sources),
                )
                for t in self.tasks
            ],
        )
        layout = (
            f"TP={self.tensor_parallel_size} × PP={self.pipeline_parallel_size}, "
            f"{self.replicas} replica(s), {self.gpus_per_job} GPU(s) per job"
        )
        lines = [
            f"estimate: {self.preset} on {self.gpu}, {layout}, {self.shards} shard(s)",
            f"basis: {self.basis}",
            format_table(("figure", "expected (low - high)"), rows),
            work,
        ]
        lines += [f"- {note}" for note in self.notes]
        return "\n".join(lines) + "\n"


def bound_line(preset: str, bounded: Sequence[TaskWork]) -> str:
    """The one line for tasks priced at their whole budget: the figure is a bound, and the
    pilot that narrows it."""
    names = ",".join(t.task for t in bounded)
    budget = max(t.max_tokens for t in bounded)
    size = max(min(t.samples, default_size(t.samples)) for t in bounded)
    return (
        f"bound: {names} ha{'s' if len(bounded) == 1 else 've'} no past run or pilot, so every "
        f"answer is priced at its whole budget (up to {budget} tokens): the figure is an upper "
        f"bound. `evalpipe submit --preset {preset} --tasks {names} --pilot --cluster CLUSTER` "
        f"measures the answer lengths on up to {size} samples a task first (docs/planner.md, Pilot)"
    )


def _matching_calibration(
    calibrations: Sequence[Calibration], preset: Preset, plan: Plan
) -> Calibration | None:
    found = [
        c
        for c in calibrations
        if (c.preset, c.gpu, c.tensor_parallel_size, c.pipeline_parallel_size)
        == (preset.name, plan.gpu, plan.tensor_parallel_size, plan.pipeline_parallel_size)
        and c.backend == "vllm"
    ]
    return max(found, key=lambda c: c.created_at) if found else None


def _matching_jobs(jobs: Sequence[PastJob], preset: Preset, plan: Plan) -> list[PastJob]:
    layout = (plan.tensor_parallel_size, plan.pipeline_parallel_size)
    return [
        j
        for j in jobs
        if j.preset == preset.name
        and j.gpu == plan.gpu
        and (j.tp, j.pp) == layout
        and j.backend == "vllm"
        and j.tasks
    ]


def _lengths(t: TaskRecord) -> Span:
    mean = t.generated_tokens / t.completions if t.completions else 1.0
    return Span(mean, mean, max(mean, float(t.longest)))


def _past_work(job: PastJob) -> list[TaskWork]:
    """A past job's work as it happened (means per sample)."""
    return [
        TaskWork(
            task=t.task,
            category="",
            samples=t.samples,
            completions=t.completions // t.samples if t.completions else 0,
            prompt_tokens=Span.exact(t.prompt_tokens / t.samples),
            # The mean, and the longest completion that decoded its last steps alone.
            generated_tokens=_lengths(t),
            max_tokens=t.longest,
            score_s=Span.exact(0.0),
            sources=(),
        )
        for t in job.tasks
        if t.samples
    ]


def _spread(values: Sequence[float]) -> Span:
    """The median of measured values, ranged by their extremes and a calibration's own spread."""
    mid = statistics.median(values)
    return Span(
        min(min(values), mid * CALIBRATED.low), mid, max(max(values), mid * CALIBRATED.high)
    )


def _job_name(job: PastJob) -> str:
    """run, or run/shards/i for one array task's directory."""
    return "/".join(job.path.parts[-3:] if RunDir(job.path).is_shard else job.path.parts[-1:])


def uncalibrated_load(preset: Preset, plan: Plan) -> Span:
    weights_gb = plan.weights_gib * GIB / 1e9 / plan.pipeline_parallel_size
    read = Span(weights_gb / READ_GBS.high, weights_gb / READ_GBS.mid, weights_gb / READ_GBS.low)
    eager = bool(preset.engine_kwargs.get("enforce_eager"))
    load = IMPORT_S + read + (ENGINE_INIT_EAGER_S if eager else ENGINE_INIT_S)
    if plan.tensor_parallel_size * plan.pipeline_parallel_size > 1:
        load = load + WORKERS_S
    return load


def probed_prefill(past: Sequence[PastJob]) -> float:
    """Seconds a prompt token, as the pilots' batch probes among `past` prefilled theirs (0:
    none probed)."""
    probes = [j.probe for j in past if j.probe is not None and j.probe.prompt_tokens]
    tokens = sum(p.prompt_tokens for p in probes)
    return math.fsum(p.prefill_s for p in probes) / tokens if tokens else 0.0


def basis(
    preset: Preset,
    gpu: Gpu,
    plan: Plan,
    *,
    calibrations: Sequence[Calibration] = (),
    jobs: Sequence[PastJob] = (),
) -> Basis:
    """The rates and start-up to estimate with: a smoke calibration of this preset/GPU/layout
    if there is one (else the roofline, else the finished jobs' own engine steps), corrected
    by finished jobs of the same preset/GPU/layout when there are any. Raises EstimateError
    when neither roofline nor smoke exists."""
    smoke = _matching_calibration(calibrations, preset, plan)
    past = _matching_jobs(jobs, preset, plan)
    on: list[str] = []
    ends: dict[str, Rates] = {}
    if smoke is None and past and not gpu.bf16_tflops:
        # No roofline (the CPU engine): a line fitted to the finished jobs' decode steps, or
        # where they recorded none, their seconds per token.
        fit = fit_steps(StepProfile.merged(j.steps for j in past))
        if fit is not None:
            prefill = probed_prefill(past)
            rates = from_steps(fit, preset, gpu, plan, prefill_s=prefill)
            ends = {end: from_steps(fit, preset, gpu, plan, end, prefill)
                    for end in ("low", "high")}  # fmt: skip
            on.append(rates.basis)
        else:
            rates = per_token(preset, gpu)
        factor = CALIBRATED
        load = uncalibrated_load(preset, plan)
    elif smoke is not None:
        rates = from_smoke(smoke, preset, gpu, plan)
        factor = CALIBRATED
        started = sum(smoke.phases_s.get(k, 0.0) for k in ("import", "load", "first_token"))
        load = Span(started * CALIBRATED.low, started, started * 1.5)
        on.append(rates.basis)
    else:
        rates = roofline(preset, gpu, plan)
        share = ROOFLINE_SHARE
        factor = Span(1.0 / share.high, 1.0 / share.mid, 1.0 / share.low)
        load = uncalibrated_load(preset, plan)
    overhead = RUN_OVERHEAD_S
    power = Span.exact(gpu.power_w) if gpu.power_w else None
    measured_power = False
    if past:
        ratios = [
            j.generate_s / predicted
            for j in past
            if (predicted := generate_s(rates, _past_work(j), j.replicas, "mid")) > 0
            and j.generate_s > 0
        ]
        if ratios:
            factor = _spread(ratios)
        load = _spread([j.load_s / j.attempts for j in past])
        overhead = _spread([j.overhead_s / j.attempts for j in past])
        watts = [
            j.energy_j / (j.gpus * j.wall_s) for j in past if j.energy_j and j.gpus and j.wall_s
        ]
        if watts:
            power, measured_power = _spread(watts), True
        named = ", ".join(_job_name(j) for j in past[:5]) + (" …" if len(past) > 5 else "")
        on.append(f"{len(past)} finished job(s) of this preset/GPU/layout: {named}")
    return Basis(
        rates=rates,
        rate_factor=factor,
        load_s=load,
        overhead_s=overhead,
        power_w=power,
        power_measured=measured_power,
        calibrated_on=tuple(on),
        ends=ends,
    )


def estimate(
    preset: Preset,
    plan: Plan,
    tasks: Sequence[TaskWork],
    how: Basis,
    *,
    shards: int = 1,
    replicas: int | None = None,
) -> Estimate:
    """The cost of `tasks` as `shards` array jobs of `plan`'s layout; `replicas` (default the
    plan's) engines per job."""
    copies = replicas or plan.replicas
    per_replica = plan.total_gpus // plan.replicas
    share = [t.shard(shards) for t in tasks]
    generation = _span(
        lambda end: generate_s(how.rates_at(end), share, copies, end) * _end(how.rate_factor, end)
    )
    scoring = total(t.score_s.scale(t.samples) for t in share)
    wall = how.overhead_s + how.load_s + generation.combine(scoring, max)
    gpus = per_replica * copies
    gpu_hours = wall.scale(shards * gpus / 3600)
    energy = None
    if how.power_w is not None:
        energy = gpu_hours.combine(how.power_w, lambda h, w: h * w / 1000)
    notes = []
    if not how.calibrated:
        notes.append(
            "uncalibrated: the roofline is an optimistic bound (the low end); the expected value "
            f"assumes vLLM reaches {ROOFLINE_SHARE.mid:.0%} of it. Calibrate with `evalpipe "
            "smoke` or a finished run of this preset, GPU and layout."
        )
    bounded = [t for t in tasks if t.length_bound]
    if bounded:
        notes.append(bound_line(preset.name, bounded))
    if how.power_w is not None and not how.power_measured:
        notes.append("energy at the GPUs' board power (no measured run): an upper bound")
    notes += [t.long_prompt.line() for t in tasks if t.long_prompt is not None]
    source = "calibrated on " + "; ".join(how.calibrated_on) if how.calibrated else how.rates.basis
    return Estimate(
        preset=preset.name,
        gpu=plan.gpu,
        tensor_parallel_size=plan.tensor_parallel_size,
        pipeline_parallel_size=plan.pipeline_parallel_size,
        replicas=copies,
        gpus_per_job=gpus,
        shards=shards,
        tasks=tuple(tasks),
        load_s=how.load_s,
        generate_s=generation,
        score_s=scoring,
        overhead_s=how.overhead_s,
        wall_s=wall,
        gpu_hours=gpu_hours,
        energy_kwh=energy,
        energy_measured=how.power_measured,
        basis=source,
        calibrated_on=how.calibrated_on,
        notes=tuple(notes),
    )
