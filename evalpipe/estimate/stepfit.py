"""A decode step's cost against its batch, fitted to a finished job's own steps (the manifest's
`occupancy.steps`): step = fixed + batch × per sequence, the line `evalpipe smoke`'s probe fits,
for a device with neither a roofline nor a smoke record (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from evalpipe.rundir.stepprofile import StepProfile

# A bin counts towards the batches' range once it holds this many steps: one or two steps
# of a batch size (a load spike, the last sequences) do not make a range.
MIN_STEPS = 3
# The largest batch the fit rests on must be this multiple of the smallest for the slope to
# say anything: over a narrower range, fixed and per-sequence costs cannot be told apart.
MIN_SPREAD = 3.0


@dataclass(frozen=True, kw_only=True)
class StepFit:
    """The fitted line, and the steps it rests on."""

    fixed_s: float
    seq_s: float
    steps: int
    low_batch: float  # the smallest and largest batch among the bins that count
    high_batch: float
    mean_batch: float  # sequences per step, over every step

    @property
    def fitted(self) -> bool:
        """Whether the batches spread enough to tell the per-sequence cost from the fixed."""
        return self.high_batch >= MIN_SPREAD * self.low_batch

    def line(self) -> str:
        span = f"{self.steps} decode steps at batches {self.low_batch:.0f}-{self.high_batch:.0f}"
        if not self.fitted:
            return (
                f"{span}: too narrow a range (under {MIN_SPREAD:g}×) to fit a step's cost per "
                "sequence, so priced at their seconds per token, the low end as if a step cost "
                "the same at any batch"
            )
        return f"{span}: step = {self.fixed_s * 1e3:.1f} ms + {self.seq_s * 1e3:.2f} ms × batch"


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
    counted = [b.batch for b in bins if b.steps >= MIN_STEPS] or [mean_b]
    return StepFit(
        fixed_s=fixed,
        seq_s=slope,
        steps=steps,
        low_batch=min(counted),
        high_batch=max(counted),
        mean_batch=mean_b,
    )
