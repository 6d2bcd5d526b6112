"""Choose a submission's shards, replicas and time limit from its estimate: the fewest shards whose
predicted wall time fits the time limit with a margin, or, for a target wall time, the layout
that meets it with the fewest GPU-hours (every shard and replica pays its own model load)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from evalpipe.core.errors import EstimateError
from evalpipe.core.span import fmt_seconds

if TYPE_CHECKING:  # annotations only: the job options take MARGIN without the cost model
    from evalpipe.estimate.cost import Estimate

# With --shards/--time auto, a shard's predicted wall (its high end) may fill this share of the
# time limit.
MARGIN = 0.8
MAX_SHARDS = 64
MIN_MINUTES = 10  # a shorter limit leaves no room for the queue's start-up jitter


def slurm_time(minutes: int) -> str:
    """SLURM's HH:MM:00, or D-HH:MM:00 from a day on."""
    days, rest = divmod(minutes, 24 * 60)
    text = f"{rest // 60:02d}:{rest % 60:02d}:00"
    return f"{days}-{text}" if days else text


@dataclass(frozen=True, kw_only=True)
class Limit:
    """The time a shard must fit in, and where that figure comes from."""

    minutes: int
    source: str  # "--time", "cluster C's max_time", "cluster C's time_limit", "--target-wall"


@dataclass(frozen=True, kw_only=True)
class Choice:
    """What was chosen, the estimate of it, and why, in sentences printed before submitting."""

    shards: int
    replicas: int
    time_limit: str
    estimate: Estimate
    reasons: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "shards": self.shards,
            "replicas": self.replicas,
            "time_limit": self.time_limit,
            "reasons": list(self.reasons),
        }


def time_for(est: Estimate, margin: float, max_minutes: int | None) -> int:
    """Minutes for a shard: the predicted wall's high end over the margin, rounded up."""
    minutes = max(MIN_MINUTES, math.ceil(est.wall_s.high / margin / 60))
    if max_minutes is not None and minutes > max_minutes:
        raise EstimateError(
            f"A shard is predicted to take up to {fmt_seconds(est.wall_s.high)}; with the "
            f"{margin:.0%} margin that needs {minutes} min, more than the site allows "
            f"({max_minutes} min). Use --shards auto (or more shards) so each fits."
        )
    return minutes


def _fits(est: Estimate, limit: Limit, margin: float) -> bool:
    return est.wall_s.high <= margin * limit.minutes * 60


def _line(est: Estimate) -> str:
    return (
        f"{est.shards} shard(s) × {est.replicas} replica(s): wall up to "
        f"{fmt_seconds(est.wall_s.high)} (expected {fmt_seconds(est.wall_s.mid)}), "
        f"{est.gpu_hours.mid:.3g} GPU-hours expected"
    )


def choose(
    cost: Callable[[int, int], Estimate],
    *,
    shards: int | None,
    replicas: int,
    limit: Limit,
    auto_time: bool,
    margin: float = MARGIN,
    max_minutes: int | None = None,
    target_wall_s: float | None = None,
) -> Choice:
    """`cost(shards, replicas)` estimates one layout. `shards` None: choose them; `replicas`:
    the most the node holds (the plan's). With `target_wall_s`, replicas from 1 to that most
    and shards are searched for the fewest GPU-hours whose wall's high end meets the target;
    otherwise replicas stay and the fewest shards fitting `limit` win. The time limit is the
    chosen shard's prediction over `margin` when `auto_time`, else `limit` itself."""
    reasons: list[str] = []
    if target_wall_s is not None:
        chosen = _for_target(cost, shards, replicas, target_wall_s, reasons)
    elif shards is None:
        chosen = _fewest_shards(cost, replicas, limit, margin, reasons)
    else:
        chosen = cost(shards, replicas)
        reasons.append(f"{shards} shard(s) as given: {_line(chosen)}")
    if auto_time:
        minutes = time_for(chosen, margin, max_minutes)
        reasons.append(
            f"time limit {slurm_time(minutes)}: the predicted wall's high end "
            f"{fmt_seconds(chosen.wall_s.high)} is {margin:.0%} of it"
        )
    else:
        minutes = limit.minutes
        if not _fits(chosen, limit, margin):
            reasons.append(
                f"WARNING: the predicted wall's high end {fmt_seconds(chosen.wall_s.high)} "
                f"exceeds {margin:.0%} of the time limit ({limit.source}, {minutes} min): a "
                "shard may run out of time and requeue (--time auto or --shards auto avoid it)"
            )
    return Choice(
        shards=chosen.shards,
        replicas=chosen.replicas,
        time_limit=slurm_time(minutes),
        estimate=chosen,
        reasons=tuple(reasons),
    )


def _fewest_shards(
    cost: Callable[[int, int], Estimate],
    replicas: int,
    limit: Limit,
    margin: float,
    reasons: list[str],
) -> Estimate:
    one = cost(1, replicas)
    if _fits(one, limit, margin):
        reasons.append(
            f"1 shard fits: {_line(one)}, within {margin:.0%} of the {limit.minutes} min limit "
            f"({limit.source})"
        )
        return one
    for shards in range(2, MAX_SHARDS + 1):
        est = cost(shards, replicas)
        if _fits(est, limit, margin):
            reasons.append(
                f"{shards} shards, the fewest whose predicted wall fits {margin:.0%} of the "
                f"{limit.minutes} min limit ({limit.source}); 1 shard would take up to "
                f"{fmt_seconds(one.wall_s.high)}. {_line(est)}; each shard loads the model "
                f"({fmt_seconds(est.load_s.mid)} expected)"
            )
            return est
    raise EstimateError(
        f"Even {MAX_SHARDS} shards of {replicas} replica(s) are predicted to exceed "
        f"{margin:.0%} of the {limit.minutes} min limit ({limit.source}): "
        f"{_line(cost(MAX_SHARDS, replicas))}. Ask for a longer --time, use fewer tasks or "
        "--limit, or a larger GPU."
    )


def _for_target(
    cost: Callable[[int, int], Estimate],
    shards: int | None,
    most: int,
    target_s: float,
    reasons: list[str],
) -> Estimate:
    seen: list[Estimate] = []
    candidates: list[Estimate] = []
    for copies in range(most, 0, -1):  # more replicas first: one job, one queue wait
        for count in [shards] if shards is not None else range(1, MAX_SHARDS + 1):
            est = cost(count, copies)
            seen.append(est)
            if est.wall_s.high <= target_s:
                candidates.append(est)
                break  # more shards only add loads
    if not candidates:
        fastest = min(seen, key=lambda e: e.wall_s.high)
        raise EstimateError(
            f"No layout meets --target-wall {fmt_seconds(target_s)}: the fastest searched is "
            f"{_line(fastest)}. Allow more time, or use fewer tasks or --limit."
        )
    best = min(candidates, key=lambda e: (round(e.gpu_hours.mid, 6), -e.replicas))
    reasons.append(
        f"target wall {fmt_seconds(target_s)}: {_line(best)}, the fewest GPU-hours of "
        f"{len(candidates)} layout(s) meeting it (each shard and replica pays its own load)"
    )
    return best
