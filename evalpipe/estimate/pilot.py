"""The full run's estimate from a pilot's measurements: per task the answer lengths the pilot
saw (a 90 % interval on their mean, from the sample's own spread), at the rates of the engine
that ran it (its finished job calibrates the basis, estimate/cost.py)."""

from __future__ import annotations

import dataclasses
import math
import shlex
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from evalpipe.catalog.gpus import Gpu, load_gpus
from evalpipe.catalog.pilot import Z90
from evalpipe.catalog.preset import Preset
from evalpipe.catalog.selection import Selection
from evalpipe.core.errors import EstimateError, RunDirError
from evalpipe.core.options import to_argv
from evalpipe.core.span import Span, fmt_span
from evalpipe.core.textable import format_table
from evalpipe.estimate.cost import Estimate
from evalpipe.estimate.history import load_history
from evalpipe.estimate.predict import Prediction, predictor
from evalpipe.estimate.workmodel import TaskWork
from evalpipe.planning import planner
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.manifest import Manifest, read_manifest
from evalpipe.rundir.pilotrecord import PilotRecord
from evalpipe.rundir.samplelog import read_samples


@dataclass(frozen=True, kw_only=True)
class Measured:
    """One task's answer lengths as the pilot measured them."""

    task: str
    lengths: tuple[float, ...]  # per sample: its completions' mean length, tokens
    population: int  # the samples the full run owes
    longest: int

    @property
    def mean(self) -> float:
        return statistics.fmean(self.lengths)

    @property
    def half_width(self) -> float:
        """The 90 % interval's half-width on the mean (finite-population corrected)."""
        n = len(self.lengths)
        if n < 2:
            return self.mean
        fpc = math.sqrt(max(0.0, (self.population - n) / max(1, self.population - 1)))
        return Z90 * statistics.stdev(self.lengths) / math.sqrt(n) * fpc

    def span(self, max_tokens: int) -> Span:
        """The mean with its interval; the high end also the longest answer seen (it decodes
        its last steps alone, estimate/cost.py), within max_tokens."""
        low = max(0.0, self.mean - self.half_width)
        high = min(float(max_tokens), max(self.mean + self.half_width, float(self.longest)))
        return Span(low, self.mean, max(high, self.mean))

    def line(self) -> str:
        rel = self.half_width / self.mean if self.mean else 0.0
        return (
            f"pilot: {len(self.lengths)} of {self.population} samples, mean answer "
            f"{self.mean:.0f} tok ±{rel:.0%} (90 %)"
        )


def pilot_manifest(run: Path) -> tuple[Manifest, PilotRecord]:
    """The manifest of a run directory that began as a pilot, and its pilot; RunDirError
    saying what to do where it is not one."""
    manifest = read_manifest(RunDir(run))
    if manifest is None or manifest.pilot is None:
        raise RunDirError(
            f"{run} holds no pilot (its manifest records no `pilot`): run one first with "
            "`evalpipe run … --pilot` or `evalpipe submit … --pilot`, then pass its run directory."
        )
    if manifest.status != "complete":
        raise RunDirError(
            f"The pilot in {run} is {manifest.status}, so its figures are partial: finish it "
            f"(rerun its command with --out {shlex.quote(str(run))}) before estimating from it."
        )
    return manifest, manifest.pilot


def measured(run: Path) -> dict[str, Measured]:
    """Per task the pilot's answer lengths (tasks answered by ranking options have none)."""
    _, pilot = pilot_manifest(run)
    ids = pilot.keys
    per_task: dict[str, list[float]] = {}
    longest: dict[str, int] = {}
    for record in read_samples(RunDir(run).samples).records:
        counts = record.completion_tokens
        if record.key not in ids or record.option_logprobs or not counts:
            continue
        per_task.setdefault(record.task, []).append(sum(counts) / len(counts))
        longest[record.task] = max(longest.get(record.task, 0), max(counts))
    return {
        task: Measured(
            task=task,
            lengths=tuple(lengths),
            population=pilot.tasks[task].of,
            longest=longest[task],
        )
        for task, lengths in per_task.items()
    }


def narrowed(work: TaskWork, seen: Measured | None, done: int) -> TaskWork:
    """`work` with the pilot's lengths (where it measured the task) and without the `done`
    samples the full run resumes."""
    left = max(0, work.samples - done)
    if seen is None:
        return dataclasses.replace(work, samples=left)
    # task_work's sources: the prompts', then the lengths' (replaced here), then the rest.
    prompts, _, *rest = work.sources
    return dataclasses.replace(
        work,
        samples=left,
        generated_tokens=seen.span(work.max_tokens),
        sources=(prompts, seen.line(), *rest),
        length_bound=False,
    )


@dataclass(frozen=True, kw_only=True)
class PilotEstimate:
    """What the pilot measured and the estimates built from it."""

    run: Path
    measured: dict[str, Measured]
    prediction: Prediction  # every sample at the pilot's lengths and rates, re-estimable
    full: Estimate  # its estimate: every sample, as if none were run
    remaining: Estimate  # what the full run still generates once it resumes the pilot's
    pilot_wall_s: float
    pilot_gpu_hours: float

    def describe(self, command: str) -> str:
        rows = [
            (m.task, f"{len(m.lengths)}/{m.population}", f"{m.mean:.0f}",
             f"{m.mean - m.half_width:.0f}-{m.mean + m.half_width:.0f}", m.longest)
            for m in self.measured.values()
        ]  # fmt: skip

        def hours(h: float) -> str:
            return f"{h:.3g}"

        estimates = [
            ("full run, every sample", self.full),
            ("after the pilot (its samples resumed)", self.remaining),
        ]
        return (
            "\n".join(
                [
                    f"pilot {self.run}: {self.pilot_wall_s:.0f} s of wall, "
                    f"{self.pilot_gpu_hours:.3g} GPU-hours",
                    format_table(
                        ("task", "measured", "mean answer tok", "90 % interval", "longest"), rows
                    ),
                    f"basis: {self.full.basis}",
                    format_table(
                        ("estimate", "wall (low - high)", "GPU-hours (low - high)"),
                        [
                            (k, fmt_span(e.wall_s), fmt_span(e.gpu_hours, hours))
                            for k, e in estimates
                        ],
                    ),
                    f"submit the full run: {command}",
                ]
            )
            + "\n"
        )


def after_pilot(prediction: Prediction, run: Path) -> Prediction:
    """`prediction` (calibrated on the pilot's job among others) with the pilot's lengths and
    without the samples the pilot ran."""
    seen = measured(run)
    _, pilot = pilot_manifest(run)
    selected = [w.task for w in prediction.work]
    if set(selected) != set(pilot.tasks):
        raise EstimateError(
            f"The pilot in {run} ran {', '.join(pilot.tasks)}; this submission selects "
            f"{', '.join(selected)}. The full run continues the pilot's run directory, so it "
            "takes the pilot's tasks and --limit: pass the same selection options."
        )
    work = tuple(narrowed(w, seen.get(w.task), pilot.drawn(w.task)) for w in prediction.work)
    return dataclasses.replace(prediction, work=work)


def _plan(preset: Preset, manifest: Manifest, run: Path) -> tuple[Gpu, planner.Plan]:
    """The GPU and layout the pilot ran on: its submission's plan, else its devices."""
    gpus = load_gpus()
    jobs = load_history([run], gpus)
    gpu_name = manifest.plan.gpu if manifest.plan else (jobs[0].gpu if jobs else None)
    if gpu_name not in gpus:
        raise EstimateError(
            f"The pilot in {run} ran on a device the GPU catalogue (configs/gpus.yaml) does "
            "not name, so its rates cannot be carried to a plan; add the device there."
        )
    config = manifest.config
    per_replica = config.tensor_parallel_size * config.pipeline_parallel_size
    plan = planner.plan(
        preset,
        gpus[gpu_name],
        gpus_per_node=max(per_replica * config.replicas, 1),
        tp=config.tensor_parallel_size,
        pp=config.pipeline_parallel_size,
        replicas=config.replicas,
        max_model_len=config.model.get("max_model_len"),
        read_model_config=False,
    )
    return gpus[gpu_name], plan


def pilot_estimate(
    preset: Preset, selection: Selection, run: Path, calibration_dirs: Sequence[Path] = ()
) -> PilotEstimate:
    """The full run's estimate from the pilot in `run`, on the pilot's GPU and layout: its
    rates those of a smoke record in `calibration_dirs` (or the roofline) corrected by the
    pilot's job, or where neither exists a step cost fitted to the pilot's own engine steps
    (its seconds per token where its batches were too alike to fit one)."""
    manifest, _ = pilot_manifest(run)
    gpu, plan = _plan(preset, manifest, run)
    full_selection = dataclasses.replace(selection, pilot=None, pilot_seed=None)
    base = predictor(
        preset, gpu, plan, full_selection, results=[run], calibration_dirs=calibration_dirs
    )
    seen = measured(run)
    prediction = dataclasses.replace(
        base, work=tuple(narrowed(w, seen.get(w.task), 0) for w in base.work)
    )
    remaining = after_pilot(base, run).estimate()
    gpus = manifest.config.gpus  # as the estimate counts them: the CPU engine is one device
    return PilotEstimate(
        run=run,
        measured=seen,
        prediction=prediction,
        full=prediction.estimate(),
        remaining=remaining,
        pilot_wall_s=manifest.wall_s,
        pilot_gpu_hours=manifest.wall_s * gpus / 3600,
    )


def after_pilot_command(preset: str, selection: Selection, run: Path) -> str:
    """The `evalpipe submit` line that submits the full run after the pilot in `run`."""
    full = dataclasses.replace(selection, pilot=None, pilot_seed=None)
    words = [w for pair in to_argv(full) for w in pair]
    return (
        shlex.join(["evalpipe", "submit", "--preset", preset, *words, "--after-pilot", str(run)])
        + " --cluster CLUSTER"
    )
