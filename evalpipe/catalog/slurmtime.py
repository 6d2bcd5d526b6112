"""SLURM's time syntax (--time) and the --signal warning's bounds."""

from __future__ import annotations

import re

# SLURM's --time forms: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S.
_SLURM_TIME = re.compile(r"(?:(\d+)-(\d+)(?::(\d+)(?::(\d+))?)?|(\d+)(?::(\d+)(?::(\d+))?)?)")
MAX_SIGNAL_SECONDS = 65535  # SLURM's upper bound for --signal=...@SECONDS


def check_signal_seconds(value: object) -> None:
    """The preemption warning a profile or a submission asks for (ValueError if SLURM would not)."""
    if not isinstance(value, int) or not 0 <= value <= MAX_SIGNAL_SECONDS:
        raise ValueError(f"signal_seconds must be within 0..{MAX_SIGNAL_SECONDS}, got {value!r}")


def slurm_minutes(text: str) -> int:
    """Whole minutes in a SLURM time string ("90", "04:00:00", "1-12"); seconds round up."""
    m = _SLURM_TIME.fullmatch(str(text).strip())
    if not m:
        raise ValueError(
            f"time {text!r} is not a SLURM time (MM, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS)"
        )
    days, dh, dm, ds, a, b, c = (int(g) if g else 0 for g in m.groups())
    if m.group(1) is not None:
        seconds = ((days * 24 + dh) * 60 + dm) * 60 + ds
    elif m.group(7) is not None:
        seconds = (a * 60 + b) * 60 + c
    else:
        seconds = a * 60 + b
    return -(-seconds // 60)
