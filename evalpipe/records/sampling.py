"""How to generate for one task (mirrors vLLM's SamplingParams), each bound checked here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from evalpipe.core.configio import as_config

# A task file's sampling defaults; catalog/budgets.py sizes a suite's context with them without
# loading the task code.
DEFAULT_MAX_TOKENS = 256
DEFAULT_N = 1


@dataclass(frozen=True, kw_only=True)
class SamplingSettings:
    """How to generate for one task (mirrors vLLM's SamplingParams).

    Each field's bounds are checked at construction, with a ValueError naming the field, so a
    task file (read with configio.build) says which file and key; the rules that depend on the
    task (its scorer, pass@k) are the task's (tasks/config.py `check_sampling`)."""

    max_tokens: int = DEFAULT_MAX_TOKENS
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0  # sample from the k likeliest tokens; 0: all (vLLM's "off")
    min_p: float = 0.0  # drop tokens below min_p × the likeliest token's probability; 0: off
    n: int = DEFAULT_N
    stop: tuple[str, ...] = ()
    seed: int = 0
    # Generate exactly max_tokens, past the end-of-sequence token (benchmarks, probes).
    ignore_eos: bool = False
    # Special tokens (<|im_start|>, …) left out of the text; lm-eval's vLLM backend keeps them.
    skip_special_tokens: bool = True

    # Added after the first run-directory schema (see configio.as_config).
    LATER: ClassVar[tuple[str, ...]] = ("ignore_eos", "top_k", "min_p", "skip_special_tokens")

    def __post_init__(self) -> None:
        if not isinstance(self.max_tokens, int) or self.max_tokens <= 0:
            raise ValueError(
                f"sampling.max_tokens must be a positive integer, got {self.max_tokens!r}"
            )
        if not isinstance(self.n, int) or self.n <= 0:
            raise ValueError(f"sampling.n must be a positive integer, got {self.n!r}")
        if not isinstance(self.stop, tuple) or not all(isinstance(x, str) and x for x in self.stop):
            raise ValueError(
                f"sampling.stop must be a list of non-empty strings, got {self.stop!r}"
            )
        if self.temperature < 0:
            raise ValueError(f"sampling.temperature must be >= 0, got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"sampling.top_p must be in (0, 1], got {self.top_p!r}")
        # vLLM reads top_k -1 as 0 (all tokens); a model's generation_config.json may say either.
        if not isinstance(self.top_k, int) or isinstance(self.top_k, bool) or self.top_k < -1:
            raise ValueError(
                f"sampling.top_k must be 0 (off) or a positive integer, got {self.top_k!r}"
            )
        if not 0 <= self.min_p <= 1:
            raise ValueError(f"sampling.min_p must be in [0, 1] (0: off), got {self.min_p!r}")

    def to_dict(self) -> dict[str, Any]:
        """The settings as a run's configuration records and fingerprints them."""
        return as_config(self)
