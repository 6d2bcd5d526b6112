"""A pilot's size (`--pilot [FRACTION|N]`): how many samples of each task a pilot draws — a
fraction of the task, a count, or by default enough for the task's mean answer length to be
known within ±10 % at 90 % confidence (docs/planner.md, "Pilot")."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

from evalpipe.core.errors import ConfigError

AUTO = "auto"  # `--pilot` alone: the default size
Z90 = 1.6449  # the two-sided 90 % normal quantile
PRECISION = 0.10  # the mean's half-width the default size aims at, relative to the mean
# The answer lengths' coefficient of variation (sd / mean) assumed before anything is measured,
# a cautious guess: SmolLM2's answers in BENCHMARKS.md §26 varied 0.05-0.32 by task, a
# reasoning model's (some stop early, some run to the budget) vary more. The pilot reports the
# interval it reached with the measured one.
ASSUMED_CV = 0.8
FLOOR, CAP = 20, 200  # samples per task for the default size


@dataclass(frozen=True, kw_only=True)
class PilotSize:
    """`fraction` of each task, `count` samples of each, or (neither) the default rule."""

    fraction: float | None = None
    count: int | None = None

    @classmethod
    def parse(cls, text: str) -> PilotSize:
        text = text.strip()
        if text == AUTO:
            return cls()
        try:
            number = float(text)
        except ValueError:
            number = math.nan
        fix = (
            "give a fraction of each task (0 < F < 1, e.g. 0.05), a count of samples per task "
            "(N ≥ 1), or --pilot alone for the default size (±10 % on the mean length, 20-200)"
        )
        if not math.isfinite(number) or number <= 0:
            raise ConfigError(f"--pilot {text} draws no samples: {fix}.")
        if number < 1:
            return cls(fraction=number)
        if number != int(number):
            raise ConfigError(f"--pilot {text} is neither a fraction nor a count: {fix}.")
        return cls(count=int(number))

    def samples(self, task: str, population: int) -> int:
        """How many of `task`'s `population` samples the pilot draws; ConfigError when a
        count exceeds the task."""
        if self.count is not None:
            if self.count > population:
                raise ConfigError(
                    f"--pilot {self.count} is larger than task {task!r}, which has "
                    f"{population} sample(s): pass --pilot {population} or fewer (or a "
                    "fraction), or run that task in full without --pilot."
                )
            return self.count
        if self.fraction is not None:
            return max(1, math.ceil(self.fraction * population))
        return min(population, default_size(population))


def default_size(population: int, cv: float = ASSUMED_CV) -> int:
    """Samples for the mean within ±PRECISION at 90 % confidence (with the finite-population
    correction, since a pilot draws without replacement), within FLOOR..CAP."""
    n0 = (Z90 * cv / PRECISION) ** 2
    n = n0 / (1 + (n0 - 1) / population)
    return max(FLOOR, min(CAP, math.ceil(n)))


def pilot_text(text: str) -> str:
    """--pilot's argparse type: the size as given, once it parses."""
    try:
        PilotSize.parse(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text.strip()


def check_pilot(value: object) -> None:
    """The record's rule for a given pilot size (the API passes text, as the flag does)."""
    if not isinstance(value, str):
        raise ValueError(f"expected 'auto', a fraction or a count as text, got {value!r}")
    PilotSize.parse(value)
