"""The manifest's `timings` keys: `load`, `generate:<category>`, `score:<category>`, and a
pilot's `probe` (seconds added up over every attempt). The runner tags the monitor's phases with
the same names."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

Stage = Literal["generate", "score"]
LOAD = "load"
PROBE = "probe"  # a pilot's batch probe, after its samples (run/pilotprobe.py)


def phase(stage: Stage, category: str) -> str:
    """The key (and monitor phase) of one category's generation or scoring."""
    return f"{stage}:{category}"


@dataclass(frozen=True)
class Timings:
    """A manifest's timings, read by what they mean rather than by their keys."""

    seconds: Mapping[str, float]

    @property
    def load_s(self) -> float:
        return self.seconds.get(LOAD, 0.0)

    def total_s(self, stage: Stage) -> float:
        """Seconds of a stage over every category."""
        return math.fsum(v for k, v in self.seconds.items() if k.startswith(f"{stage}:"))

    def of(self, stage: Stage, category: str) -> float:
        """Seconds of one category's stage; 0 when the run did not record it."""
        return self.seconds.get(phase(stage, category), 0.0)
