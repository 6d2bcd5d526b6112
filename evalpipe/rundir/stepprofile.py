"""The engine's decode steps by batch size: the manifest's `occupancy.steps`, from which an
estimate fits a step's cost against its batch (estimate/stepfit.py) where no smoke record
says it.

Steps are summed into bins of batch size (exact up to 16 sequences, then about 8 a doubling),
so the record stays a few dozen numbers however long the run. A step in which requests were
admitted is left out: it also prefilled their prompts, which a decode step's cost is not.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

EXACT = 16  # batches up to this many sequences keep a bin each
PER_DOUBLING = 8  # bins per doubling of the batch above EXACT


def bin_of(busy: int) -> int:
    """The bin a step of `busy` sequences is summed into (its lower edge)."""
    if busy <= EXACT:
        return busy
    return int(EXACT * 2 ** (math.floor(math.log2(busy / EXACT) * PER_DOUBLING) / PER_DOUBLING))


@dataclass(frozen=True, kw_only=True)
class StepBin:
    """Decode steps of about one batch size: how many, their sequences and seconds summed."""

    steps: int
    busy: int  # sequences summed over the steps (a decoding sequence makes one token a step)
    seconds: float

    @property
    def batch(self) -> float:
        return self.busy / self.steps

    @property
    def step_s(self) -> float:
        return self.seconds / self.steps

    def __add__(self, other: StepBin) -> StepBin:
        return StepBin(
            steps=self.steps + other.steps,
            busy=self.busy + other.busy,
            seconds=self.seconds + other.seconds,
        )


@dataclass(kw_only=True)
class StepProfile:
    """Decode steps binned by batch size; mutable, because the run adds each step as it comes."""

    bins: dict[int, StepBin] = field(default_factory=dict)

    def add(self, seconds: float, busy: int) -> None:
        """One decode step of `seconds` with `busy` sequences in its batch."""
        if busy <= 0:
            return
        key = bin_of(busy)
        step = StepBin(steps=1, busy=busy, seconds=seconds)
        self.bins[key] = self.bins[key] + step if key in self.bins else step

    @classmethod
    def merged(cls, profiles: Iterable[StepProfile]) -> StepProfile:
        """Several jobs' steps together (the same engine and layout)."""
        out = cls()
        for profile in profiles:
            for key, step in profile.bins.items():
                out.bins[key] = out.bins[key] + step if key in out.bins else step
        return out

    @property
    def steps(self) -> int:
        return sum(b.steps for b in self.bins.values())

    def to_dict(self) -> dict[str, list[float]]:
        """{bin: [steps, sequences, seconds]}, bins ascending (JSON keys are strings)."""
        return {
            str(k): [b.steps, b.busy, round(b.seconds, 6)] for k, b in sorted(self.bins.items())
        }

    @classmethod
    def from_dict(cls, data: Any) -> StepProfile:
        """The stored record; a bin that is not [steps, sequences, seconds] is skipped."""
        bins: dict[int, StepBin] = {}
        for key, value in (data if isinstance(data, dict) else {}).items():
            try:
                steps, busy, seconds = value
                bins[int(key)] = StepBin(steps=int(steps), busy=int(busy), seconds=float(seconds))
            except (TypeError, ValueError):
                continue
        return cls(bins={k: b for k, b in bins.items() if b.steps > 0})
