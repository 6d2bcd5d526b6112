"""A decode step's cost against its batch, fitted to a finished job's own steps (the manifest's
`occupancy.steps`): step = fixed + batch × per sequence, the line `evalpipe smoke`'s probe fits,
for a device with neither a roofline nor a smoke record (pure).

A pilot's batches are small and its steps noisy (a shared machine), so the slope is known only
within an interval, and it is the slope that prices the full run's larger batches: the low and
high ends of the estimate take the lines at the ends of the slope's 90 % interval, each through
the steps' mean point, which the pilot measured well."""

from __future__ import annotations

import math
from dataclasses import dataclass

from evalpipe.catalog.pilot import Z90
from evalpipe.rundir.stepprofile import StepProfile

# A bin counts towards the batches' range once it holds this many steps: one or two steps
# of a batch size (a load spike, the last sequences) do not make a range.
MIN_STEPS = 3
# The largest batch the fit rests on must be this multiple of the smallest for the slope to
# say anything: over a narrower range, fixed and per-sequence costs cannot be told apart.
MIN_SPREAD = 3.0


@dataclass(frozen=True, kw_only=True)
class StepFit:
    """The fitted line, its slope's standard error, and the steps it rests on."""

    fixed_s: float
    seq_s: float
    seq_se: float  # the slope's standard error (inf where the bins cannot give one)
    steps: int
    low_batch: float  # the smallest and largest batch among the bins that count
    high_batch: float
    mean_batch: float  # sequences per step, over every step
    mean_step_s: float

    @property
    def fitted(self) -> bool:
        """Whether the batches spread enough to tell the per-sequence cost from the fixed."""
        return self.high_batch >= MIN_SPREAD * self.low_batch and math.isfinite(self.seq_se)

    def through_mean(self, slope: float) -> tuple[float, float]:
        """(fixed_s, seq_s) of the line of `slope` (at least 0) through the steps' mean point,
        its fixed cost at least 0."""
        slope = max(0.0, slope)
        return max(0.0, self.mean_step_s - slope * self.mean_batch), slope

    def line(self, end: str = "mid") -> tuple[float, float]:
        """(fixed_s, seq_s) at the estimate's `end`: the fit and the ends of its slope's 90 %
        interval; unfitted, the pilot's seconds per token (every step's cost per sequence) and
        at the low end a step that costs the same at any batch."""
        if not self.fitted:
            return self.through_mean(0.0 if end == "low" else self.mean_step_s / self.mean_batch)
        if end == "mid":
            return self.fixed_s, self.seq_s
        return self.through_mean(self.seq_s + (Z90 if end == "high" else -Z90) * self.seq_se)

    def describe(self) -> str:
        span = f"{self.steps} decode steps at batches {self.low_batch:.0f}-{self.high_batch:.0f}"
        if not self.fitted:
            return (
                f"{span}: too narrow a range (under {MIN_SPREAD:g}×) to fit a step's cost per "
                "sequence, so priced at their seconds per token, the low end as if a step cost "
                "the same at any batch"
            )
        return (
            f"{span}: step = {self.fixed_s * 1e3:.1f} ms + {self.seq_s * 1e3:.2f} ms × batch "
            f"(per sequence ±{Z90 * self.seq_se * 1e3:.2f} ms at 90 %: the estimate's range)"
        )


def fit_steps(profile: StepProfile) -> StepFit | None:
    """The least-squares line of step seconds over batch size, each bin weighted by its steps,
    neither coefficient negative; None without steps."""
    bins = list(profile.bins.values())
    steps = sum(b.steps for b in bins)
    if not steps:
        return None
    mean_b = sum(b.busy for b in bins) / steps
    mean_t = sum(b.seconds for b in bins) / steps
    spread = sum(b.steps * (b.batch - mean_b) ** 2 for b in bins)
    moment = sum(b.steps * (b.batch - mean_b) * (b.step_s - mean_t) for b in bins)
    slope = max(0.0, moment / spread) if spread else 0.0
    fixed = mean_t - slope * mean_b
    if fixed < 0:  # the line through the origin instead
        fixed = 0.0
        slope = sum(b.batch * b.seconds for b in bins) / sum(b.steps * b.batch**2 for b in bins)
    # A bin's mean varies as one step's variance over its steps: the residuals, so weighted,
    # estimate that variance, and the slope's error is the usual least-squares one.
    se = math.inf
    if len(bins) > 2 and spread:
        residual = sum(b.steps * (b.step_s - fixed - slope * b.batch) ** 2 for b in bins)
        se = math.sqrt(residual / (len(bins) - 2) / spread)
    counted = [b.batch for b in bins if b.steps >= MIN_STEPS] or [mean_b]
    return StepFit(
        fixed_s=fixed,
        seq_s=slope,
        seq_se=se,
        steps=steps,
        low_batch=min(counted),
        high_batch=max(counted),
        mean_batch=mean_b,
        mean_step_s=mean_t,
    )
