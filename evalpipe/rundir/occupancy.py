"""How full the engine's batch was while a run generated: the manifest's `occupancy` record.

A step in which fewer than half of the engine's sequence slots held a sequence is the run's
tail (long completions finishing with a nearly empty batch). The record keeps the seconds and
tokens of tail steps and of the rest, summed over attempts, so the summary can say how much of
the generation wall the tail took and how slowly it went, and how many sequences the engine
preempted (its KV cache full: their cache freed, their tokens computed again later), and
the decode steps by batch size (rundir/stepprofile.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from evalpipe.rundir.stepprofile import StepProfile

# The record's sums: a run's jobs (shards, replicas) add up to the run's.
SUMS = ("tail_s", "tail_tokens", "rest_s", "rest_tokens", "preemptions")


@dataclass(kw_only=True)
class Occupancy:
    """Generation steps split into tail (< half the slots busy) and the rest; mutable, because
    the run that holds the directory adds each step as it comes."""

    slots: int = 0  # the engine's sequence slots (the largest seen)
    tail_s: float = 0.0
    tail_tokens: int = 0
    rest_s: float = 0.0
    rest_tokens: int = 0
    preemptions: int = 0
    steps: StepProfile = field(default_factory=StepProfile)

    def add(
        self, seconds: float, busy: int, total: int, preempted: int = 0, admitted: bool = False
    ) -> None:
        """One engine step of `seconds` with `busy` of `total` slots holding a sequence (each
        made one token), in which `preempted` sequences were preempted; `admitted`: requests
        were added before it (it prefilled their prompts too)."""
        self.slots = max(self.slots, total)
        if not admitted:
            self.steps.add(seconds, busy)
        self.preemptions += preempted
        if 2 * busy < total:
            self.tail_s += seconds
            self.tail_tokens += busy
        else:
            self.rest_s += seconds
            self.rest_tokens += busy

    @property
    def tail_share(self) -> float | None:
        """The share of generation wall spent in the tail; None before any step."""
        total = self.tail_s + self.rest_s
        return self.tail_s / total if total > 0 else None

    @property
    def tail_tokens_per_s(self) -> float | None:
        return self.tail_tokens / self.tail_s if self.tail_s > 0 else None

    @property
    def rest_tokens_per_s(self) -> float | None:
        return self.rest_tokens / self.rest_s if self.rest_s > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "slots": self.slots,
            "tail_s": round(self.tail_s, 6),
            "tail_tokens": self.tail_tokens,
            "rest_s": round(self.rest_s, 6),
            "rest_tokens": self.rest_tokens,
            "preemptions": self.preemptions,
            "steps": self.steps.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Any) -> Occupancy:
        """The stored record (missing numbers read as 0)."""
        data = data if isinstance(data, dict) else {}
        return cls(
            slots=int(data.get("slots") or 0),
            tail_s=float(data.get("tail_s") or 0.0),
            tail_tokens=int(data.get("tail_tokens") or 0),
            rest_s=float(data.get("rest_s") or 0.0),
            rest_tokens=int(data.get("rest_tokens") or 0),
            preemptions=int(data.get("preemptions") or 0),
            steps=StepProfile.from_dict(data.get("steps")),
        )

    def summary(self) -> OccupancySummary | None:
        """What summary.json shows of it: None when no step reported its slots."""
        if self.tail_share is None:
            return None
        return OccupancySummary(
            slots=self.slots,
            tail_s=round(self.tail_s, 6),
            tail_tokens=self.tail_tokens,
            rest_s=round(self.rest_s, 6),
            rest_tokens=self.rest_tokens,
            preemptions=self.preemptions,
            tail_share=round(self.tail_share, 4),
            tail_tokens_per_s=_round(self.tail_tokens_per_s),
            rest_tokens_per_s=_round(self.rest_tokens_per_s),
        )


@dataclass(frozen=True, kw_only=True)
class OccupancySummary:
    """summary.json's `occupancy`: the record's sums (rounded) with the tail's share of the
    generation wall and the tokens/s of the tail and of the rest; a figure a file lacks is
    None."""

    slots: int | None = None
    tail_s: float | None = None
    tail_tokens: int | None = None
    rest_s: float | None = None
    rest_tokens: int | None = None
    preemptions: int | None = None  # sequences the engine preempted (its KV cache full)
    tail_share: float | None = None
    tail_tokens_per_s: float | None = None
    rest_tokens_per_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OccupancySummary:
        def number(value: Any) -> Any:
            return value if isinstance(value, int | float) and not isinstance(value, bool) else None

        return cls(**{f.name: number(data.get(f.name)) for f in dataclasses.fields(cls)})


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)
