"""Gather what an estimate needs on this machine — the tasks' work (tokenizer, task files), past
jobs in the results folders, smoke calibration records — and estimate a plan, or choose a
submission's shards and time limit from it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from evalpipe.catalog import registry
from evalpipe.catalog.registry import Gpu, Preset
from evalpipe.estimate.autosize import Choice, Limit, choose
from evalpipe.estimate.calibration import SHARED_FOLDER, SUFFIX, Calibration, load_calibrations
from evalpipe.estimate.cost import Basis, Estimate, basis, estimate
from evalpipe.estimate.history import load_history
from evalpipe.estimate.workmodel import TaskWork, task_work, token_counter
from evalpipe.planning.planner import Plan

DEFAULT_RESULTS = Path("results")


@dataclass(frozen=True, kw_only=True)
class Selection:
    """The tasks a job runs, as `evalpipe run` selects them."""

    categories: tuple[str, ...] | None = None
    tasks: tuple[str, ...] | None = None
    limit: int | None = None
    mc_method: str | None = None
    max_tokens: int | None = None  # --max-tokens
    since: str | None = None
    until: str | None = None


@dataclass(frozen=True, kw_only=True)
class Prediction:
    """An estimator bound to one preset and plan: its work and basis, re-estimable per layout."""

    preset: Preset
    plan: Plan
    work: tuple[TaskWork, ...]
    basis: Basis

    def estimate(self, shards: int = 1, replicas: int | None = None) -> Estimate:
        return estimate(self.preset, self.plan, self.work, self.basis, shards=shards,
                        replicas=replicas)  # fmt: skip

    def choose(
        self,
        *,
        shards: int | None,
        limit: Limit,
        auto_time: bool,
        margin: float,
        max_minutes: int | None,
        target_wall_s: float | None,
    ) -> Choice:
        return choose(
            self.estimate,
            shards=shards,
            replicas=self.plan.replicas,
            limit=limit,
            auto_time=auto_time,
            margin=margin,
            max_minutes=max_minutes,
            target_wall_s=target_wall_s,
        )


def _calibration_files(folders: Sequence[Path]) -> list[Path]:
    """Smoke records in each folder, its calibrations/ and its run directories (two levels)."""
    found: list[Path] = []
    for folder in folders:
        for pattern in (f"*{SUFFIX}", f"*/*{SUFFIX}", f"{SHARED_FOLDER}/*{SUFFIX}"):
            found += sorted(folder.glob(pattern))
    return list(dict.fromkeys(found))


def calibrations(folders: Sequence[Path]) -> list[Calibration]:
    return load_calibrations(_calibration_files(folders))


def predictor(
    preset: Preset,
    gpu: Gpu,
    plan: Plan,
    selection: Selection,
    *,
    results: Sequence[Path] = (DEFAULT_RESULTS,),
    calibration_dirs: Sequence[Path] = (),
    calibrate_on_runs: bool = True,
) -> Prediction:
    """Load the tasks (their data only where it is local) and what `results` and
    `calibration_dirs` hold about this preset; EstimateError if nothing makes rates possible."""
    from evalpipe.tasks import load_tasks
    from evalpipe.tasks.budgets import fit_tasks

    # The same selection as `evalpipe run`: named tasks alone, else the preset's categories.
    categories = selection.categories or (None if selection.tasks else preset.categories)
    tasks = load_tasks(
        categories=categories,
        tasks=selection.tasks,
        mc_method=selection.mc_method,
        since=selection.since,
        until=selection.until,
    )
    # The budgets the run will generate with, in the plan's context (capped as the runner caps).
    tasks, _ = fit_tasks(preset, tasks, max_tokens=selection.max_tokens, given=plan.max_model_len)
    jobs = load_history([p for p in results if p.is_dir()], registry.load_gpus())
    counter = token_counter(preset)
    work = tuple(
        task_work(t, preset, limit=selection.limit, history=jobs, counter=counter) for t in tasks
    )
    how = basis(
        preset,
        gpu,
        plan,
        calibrations=calibrations([*results, *calibration_dirs]),
        jobs=jobs if calibrate_on_runs else (),
    )
    return Prediction(preset=preset, plan=plan, work=work, basis=how)
