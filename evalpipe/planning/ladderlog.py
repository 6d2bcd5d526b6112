"""The OOM ladder's step records as a run's manifest keeps them: the words its weight steps and
their undoing are written with (engine/fallback.py), and the weight format they leave, read
back by reports. Writer and reader share this module, so the two never drift."""

from __future__ import annotations

import re
from collections.abc import Iterable

from evalpipe.planning.memory import WEIGHT_QUANT_STEPS

# Weight-quantization steps say this in their record, so reports can mark such runs.
WEIGHTS_MARK = "weights quantized on load by the OOM fallback"
_QUANTIZED = re.compile(r"quantization \S+ → (\S+)")
_UNDONE = re.compile("(" + "|".join(s.name for s in WEIGHT_QUANT_STEPS) + ") undone")


def weight_step(current: str | None, value: str) -> str:
    """A weight step's description: the quantization it replaced (None: none) and its own."""
    return f"quantization {current or 'none'} → {value} ({WEIGHTS_MARK})"


def undone(name: str, why: str) -> str:
    """The record of step `name` undone because the attempt after it failed with `why`."""
    return f"{name} undone: it failed with {why}"


def ladder_quantization(steps: Iterable[str]) -> str | None:
    """The weight quantization the ladder left in place, read from a manifest's step records."""
    applied: list[str] = []  # an undone step leaves the format before it in place
    for record in steps:
        if _UNDONE.match(record):
            applied.pop()
        elif found := _QUANTIZED.search(record):
            applied.append(found.group(1))
    return applied[-1] if applied else None
