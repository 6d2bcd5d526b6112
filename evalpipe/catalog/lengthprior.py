"""A published mean answer length, recorded with its source in a task or preset file: the
estimate's prior for a task nothing has run yet (estimate/workmodel.py), labelled as such."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class LengthPrior:
    """`tokens`: the mean answer length the source gives; `source`: where it is published
    (a paper's table, a model card's section), for the estimate to quote."""

    tokens: int
    source: str

    def __post_init__(self) -> None:
        if isinstance(self.tokens, bool) or not isinstance(self.tokens, int) or self.tokens <= 0:
            raise ValueError(
                f"length_prior.tokens must be a positive whole number of tokens (the published "
                f"mean answer length), got {self.tokens!r}"
            )
        if not isinstance(self.source, str) or not self.source.strip():
            raise ValueError(
                f'length_prior.source must say where the mean is published (e.g. "Qwen3 '
                f'technical report, Table 4"), got {self.source!r}'
            )


@dataclass(frozen=True, kw_only=True)
class TaskLengthPrior(LengthPrior):
    """A preset's prior for one of its tasks (a model card's figure for that benchmark)."""

    task: str

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.task, str) or not self.task:
            raise ValueError(f"length_priors: task must name a task, got {self.task!r}")
