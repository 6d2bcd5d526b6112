"""Span: a figure given as low, expected and high, and the arithmetic estimates need on it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Span:
    """low <= mid <= high; `mid` is the expected value, the bounds the range around it."""

    low: float
    mid: float
    high: float

    def __post_init__(self) -> None:
        if not self.low <= self.mid <= self.high:
            raise ValueError(f"a span needs low <= mid <= high, got {self}")

    @classmethod
    def exact(cls, value: float) -> Span:
        return cls(value, value, value)

    def __add__(self, other: Span) -> Span:
        return Span(self.low + other.low, self.mid + other.mid, self.high + other.high)

    def scale(self, factor: float) -> Span:
        return Span(self.low * factor, self.mid * factor, self.high * factor)

    def map(self, fn: Callable[[float], float]) -> Span:
        """`fn` applied to each end; `fn` must not decrease."""
        return Span(fn(self.low), fn(self.mid), fn(self.high))

    def combine(self, other: Span, fn: Callable[[float, float], float]) -> Span:
        """`fn` of the two spans' matching ends; `fn` must not decrease in either argument."""
        return Span(fn(self.low, other.low), fn(self.mid, other.mid), fn(self.high, other.high))

    def to_dict(self, digits: int = 3) -> dict[str, float]:
        return {
            k: round(v, digits)
            for k, v in (("low", self.low), ("mid", self.mid), ("high", self.high))
        }

    @classmethod
    def from_dict(cls, data: dict[str, float]) -> Span:
        return cls(float(data["low"]), float(data["mid"]), float(data["high"]))


def total(spans: Iterable[Span]) -> Span:
    out = Span.exact(0.0)
    for span in spans:
        out = out + span
    return out


def fmt_seconds(seconds: float) -> str:
    """'4.2 s', '42 s', '12.5 min', '3.20 h'."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def fmt_span(span: Span, unit: Callable[[float], str] = fmt_seconds) -> str:
    """'12.5 min (10.1 min - 18.0 min)'."""
    return f"{unit(span.mid)} ({unit(span.low)} - {unit(span.high)})"
