"""`--budget GPU_HOURS`: refuse a submission whose estimate exceeds it, saying by how much and
what would fit — the tasks to leave out, a --limit, fewer completions for repeated sampling."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from evalpipe.core.errors import ConfigError
from evalpipe.estimate.cost import Estimate
from evalpipe.estimate.workmodel import TaskWork

Estimator = Callable[[Sequence[TaskWork]], Estimate]


def _hours(estimate: Estimate) -> float:
    return estimate.gpu_hours.mid


def _largest_limit(work: Sequence[TaskWork], estimate_of: Estimator, budget: float) -> int:
    """The largest --limit whose estimate fits `budget` (0 where none does)."""
    low, high = 0, max((w.samples for w in work), default=0)
    while low < high:
        mid = (low + high + 1) // 2
        capped = [dataclasses.replace(w, samples=min(w.samples, mid)) for w in work]
        if _hours(estimate_of(capped)) <= budget:
            low = mid
        else:
            high = mid - 1
    return low


def _fewest_completions(
    work: Sequence[TaskWork], task: TaskWork, estimate_of: Estimator, budget: float
) -> tuple[int, float]:
    """The most completions per sample of repeated-sampling `task` that fit, and the GPU-hours
    then ((0, 0.0): none do)."""
    for n in range(task.completions - 1, 0, -1):
        fewer = [dataclasses.replace(w, completions=n) if w is task else w for w in work]
        if (hours := _hours(estimate_of(fewer))) <= budget:
            return n, hours
    return 0, 0.0


def check_budget(
    budget: float, work: Sequence[TaskWork], estimate_of: Estimator, *, pilot: bool = False
) -> None:
    """ConfigError when the expected GPU-hours of `work` exceed `budget`; `pilot`: the work is
    a pilot's (then the budget cannot even pay for the measurement)."""
    hours = _hours(estimate_of(work))
    if hours <= budget:
        return
    over = hours - budget
    if pilot:
        raise ConfigError(
            f"--budget {budget:g} GPU-hours is below the pilot's own cost ({hours:.3g} "
            f"GPU-hours expected, {over:.3g} over): raise --budget to what the full run may "
            "cost, or draw a smaller pilot (--pilot 0.02, or --pilot 20 samples a task)."
        )
    fits: list[str] = []
    for task in sorted(work, key=lambda w: -_hours(estimate_of([w]))):
        rest = [w for w in work if w is not task]
        if rest and _hours(estimate_of(rest)) <= budget:
            fits.append(f"leave out {task.task} (then {_hours(estimate_of(rest)):.3g} GPU-hours)")
    for task in (w for w in work if w.completions > 1):
        n, then = _fewest_completions(work, task, estimate_of, budget)
        if n:
            fits.append(
                f"{task.task} with {n} completions a sample instead of {task.completions} "
                f"(then {then:.3g} GPU-hours, {hours - then:.3g} saved)"
            )
    limit = _largest_limit(work, estimate_of, budget)
    if limit:
        fits.append(f"--limit {limit} (at most {limit} samples a task)")
    what = "; or ".join(fits) if fits else "nothing smaller of this selection: raise --budget"
    raise ConfigError(
        f"The estimate is {hours:.3g} GPU-hours (low {estimate_of(work).gpu_hours.low:.3g}, "
        f"high {estimate_of(work).gpu_hours.high:.3g}), {over:.3g} over --budget {budget:g}. "
        f"What would fit: {what}."
    )
