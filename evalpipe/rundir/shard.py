"""A run's slice: `--shard i/N` takes every N-th sample from the i-th (parsed in one place)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from evalpipe.core.errors import ConfigError

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class Shard:
    """Slice i of N: every N-th sample by index, starting at i. The N slices partition a run."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if self.count < 1 or not 0 <= self.index < self.count:
            raise ConfigError(
                f"Shard {self.index}/{self.count} is invalid: the count must be ≥ 1 and the "
                f"index in 0..count-1."
            )

    @classmethod
    def parse(cls, text: str) -> Shard:
        index, sep, count = text.partition("/")
        if not sep or not index.strip().isdigit() or not count.strip().isdigit():
            raise ConfigError(f"Shard {text!r} must look like i/N, e.g. 0/4.")
        return cls(index=int(index), count=int(count))

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def select(self, samples: Sequence[T]) -> list[T]:
        return list(samples[self.index :: self.count])
